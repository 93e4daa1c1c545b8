"""Importers: files other tools wrote, turned into store runs.

Each importer reads one format, validates every field at this boundary and
returns a Run; it never writes. ``findings.importers.ingest`` does the writing.
"""
