"""The release tooling of sps-operator (`make release`, `make publish`; docs/release.md).

The modules here are pure (text in, text or findings out) and unit-tested directly;
`cli.py` does the file and process work around them.
"""
