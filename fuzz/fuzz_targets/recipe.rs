//! The recipe parser on arbitrary text. A recipe that parses must print back to TOML that
//! parses to the same recipe: what the studio saves, the CLI must read identically.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qdq_studio::recipe::Recipe;

fuzz_target!(|text: &str| {
    let Ok(recipe) = Recipe::from_toml(text, "fuzz.toml") else {
        return;
    };
    let printed = recipe.to_toml();
    let again = Recipe::from_toml(&printed, "printed.toml")
        .unwrap_or_else(|e| panic!("a printed recipe does not parse: {e}\n{printed}"));
    assert_eq!(
        printed,
        again.to_toml(),
        "printing is not stable under a round trip"
    );
});
