"""What a third party's implementation proves itself with: `ditto_jupyter.testing.contracts`.

Test code, never imported by the product (an import-linter contract keeps it so). It needs
pytest, which `pip install ditto-jupyter` does not install.
"""
