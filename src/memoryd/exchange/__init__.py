"""Moving memories between stores: the export file format and the importer (docs/export-format.md)."""
