"""The targets a benchmark states, checked as it measures, and a closing verdict.

Each `check` prints the measured value beside its target with `met` or `MISSED`; `summary`
ends the run with one line naming every target met and every target missed, and returns the
exit status (1 when any was missed), so a missed target is never a number to spot in a table.
"""


class Targets:
    def __init__(self):
        self.results = []

    def check(self, name, value, op, limit, fmt="{:.3f}"):
        """Records `value op limit` (op is "<=" or ">=") and prints the line."""
        ok = value <= limit if op == "<=" else value >= limit
        self.results.append((name, ok))
        shown, bound = fmt.format(value), fmt.format(limit)
        print(f"  {name:62} = {shown:>8}  (target {op} {bound}: {'met' if ok else 'MISSED'})")
        return ok

    def summary(self):
        met = [n for n, ok in self.results if ok]
        missed = [n for n, ok in self.results if not ok]
        print(f"\ntargets met: {len(met)} of {len(self.results)}"
              + (f"; MISSED: {'; '.join(missed)}" if missed else "; none missed"))
        return 1 if missed else 0
