"""``memoryd store copy``: a store moved to another backend, resumable and verified.

- ``tables``: what is copied (every table of record, in key order) and how a row adapts;
- ``copier``: the run (batches with a progress marker, one source snapshot, verification);
- ``guard``: what a daemon and a second copy check (an unfinished target is refused).
"""
