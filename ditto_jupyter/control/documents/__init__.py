"""The notebook documents checkpoints hold: stored cell by cell, checked, compared.

- `validation`: what a checkpoint accepts as a document (nbformat 4, cell by cell);
- `storage`: `DocumentStore`, a document in the blob store as content-addressed cells with
  large outputs (images) as chunks of their own, and read back exactly;
- `cells`: the cells of two documents aligned and compared (nbdime).
"""

from __future__ import annotations

from ditto_jupyter.control.documents.storage import (
    DOCUMENT_KIND,
    PART_KIND,
    DocumentStore,
    LoadedDocument,
    SavedDocument,
    StoredCell,
)
from ditto_jupyter.control.documents.validation import cell_source, check_document

__all__ = [
    "DOCUMENT_KIND",
    "PART_KIND",
    "DocumentStore",
    "LoadedDocument",
    "SavedDocument",
    "StoredCell",
    "cell_source",
    "check_document",
]
