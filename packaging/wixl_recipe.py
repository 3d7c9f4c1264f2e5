"""Writes the copy of packaging/windows/main.wxs that msitools' wixl builds on Linux.

wixl implements most of WiX 3 but not the feature-tree dialogs (UIRef), the Environment
element (the "Add to PATH" feature) nor MajorUpgrade's Schedule attribute, and it reads
Source paths with '/' only. Those are left out or rewritten here; everything else (the exe,
the ONNX Runtime DLLs, the Start-menu shortcut, upgrades) is the recipe as written.

Usage: python3 packaging/wixl_recipe.py main.wxs out.wxs
"""

import sys
import xml.etree.ElementTree as ET

WIX = "http://schemas.microsoft.com/wix/2006/wi"


def strip(recipe: str) -> str:
    ET.register_namespace("", WIX)
    # Processing instructions (<?define?>, <?if?>) are kept by parsing with a TreeBuilder
    # that inserts them.
    parser = ET.XMLParser(target=ET.TreeBuilder(insert_pis=True, insert_comments=True))
    root = ET.fromstring(recipe, parser=parser)
    q = lambda tag: f"{{{WIX}}}{tag}"
    for parent in root.iter():
        for child in list(parent):
            drop = child.tag == q("UIRef")
            drop |= child.tag == q("Component") and child.find(q("Environment")) is not None
            drop |= child.tag == q("Feature") and child.get("Id") == "Environment"
            if drop:
                parent.remove(child)
        if parent.tag == q("MajorUpgrade"):
            parent.attrib.pop("Schedule", None)
        if "Source" in parent.attrib:
            parent.set("Source", parent.get("Source").replace("\\", "/"))
        if parent.tag == q("Icon") and "SourceFile" in parent.attrib:
            parent.set("SourceFile", parent.get("SourceFile").replace("\\", "/"))
    # What precedes the root (the <?define?> of the install folder) is outside the tree.
    prolog = recipe[recipe.index("?>") + 2 : recipe.index("<Wix")]
    body = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="utf-8"?>' + prolog + body


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write(strip(text))
