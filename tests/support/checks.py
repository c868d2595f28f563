"""The command-line tests' one way to check (tests/cli/*_test.py, tests/scripts/*_test.py): check() prints `ok` or `FAIL` and
what was compared, summary() prints the tally and gives the exit status."""
failures = 0
checks = 0


def check(condition, what):
    global failures, checks
    checks += 1
    if not condition:
        failures += 1
    print(f"{'ok' if condition else 'FAIL'} {what}")
    return condition


def summary():
    print(f"{checks - failures} passed, {failures} failed")
    return 1 if failures else 0
