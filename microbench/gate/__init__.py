"""`dawnscope gate`: a baseline and a current capture (results files, pytest-benchmark JSON, traces or their
reports) compared for a CI job: exit 0 no regression beyond the noise floor, 1 a regression, 2 the captures cannot
be compared (gate.py); baselines kept with their fingerprint (baselines.py); JUnit XML for CI (junit.py)."""
