"""The base layer every other package may import: models, errors and the blob store.

It imports nothing else of ditto_jupyter, and nothing of Jupyter.
"""
