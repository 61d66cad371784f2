"""One shard of the lexical index beside a store: a tantivy index of some rows' words.

FTS5 ranks every match of a query by BM25 before it can return the best: at a
million memories, a query of common words costs about 100 ms on a quiet
machine (bench/studies/lexical_engines.py). tantivy keeps block-wise score
bounds and skips the blocks that cannot reach the top k (block-max WAND): the
same queries take 2 - 9 ms there. store/lexindex/index_set.py keeps a set of these
shards in step with the store; this module is one shard.

A shard holds the active rows whose ``seq`` falls in its range, with:

* ``seq``: the row's key (indexed, to delete it; a fast field, to read it back);
* ``vis``: its scope key (``scope:owner``), a raw term a search requires to be
  one of the reader's keys, so scope is applied inside the search;
* ``kind``: a raw term, required when a search names a kind;
* ``content``: its words (not stored), with frequencies and no positions
  (BM25 needs no positions: a quoted phrase is answered by the store).

The words are split the way FTS5's ``unicode61`` splits them (runs of letters
and digits), lower-cased, folded to ASCII and stemmed (Snowball English, where
FTS5 uses Porter's first stemmer).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from memoryd.privatefs import make_dirs

TOKENIZER = "memoryd_en"
#: The heap of a writer that applies the log (tantivy's floor is 15 MB per thread).
APPLY_HEAP = 20_000_000
#: The heap and threads of a writer that builds a shard from the store.
BUILD_HEAP = 128_000_000
BUILD_THREADS = 2
#: Tokens longer than this many bytes are left out of the shards (base64 blobs; a run of about
#: 85 CJK characters): a query with such a word is answered by the store, which keeps them.
MAX_TOKEN = 255

Row = tuple[int, str, str, str | None]  # seq, content, scope key, kind


def analyzer() -> Any:
    import tantivy

    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(MAX_TOKEN))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.ascii_fold())
            .filter(tantivy.Filter.stemmer("english"))
            .build())


def _schema() -> Any:
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_unsigned_field("seq", stored=False, indexed=True, fast=True)
    sb.add_text_field("vis", stored=False, tokenizer_name="raw")
    sb.add_text_field("kind", stored=False, tokenizer_name="raw")
    sb.add_text_field("content", stored=False, tokenizer_name=TOKENIZER, index_option="freq")
    return sb.build()


class Shard:
    """A tantivy index in one directory, with at most one writer (this process's)."""

    def __init__(self, number: int, path: Path):
        import tantivy

        self.number = number
        self.path = path
        if (path / "meta.json").exists():
            self.index = tantivy.Index.open(str(path))
        else:
            make_dirs(path)
            self.index = tantivy.Index(_schema(), path=str(path), reuse=True)
        self.index.register_tokenizer(TOKENIZER, analyzer())
        self.schema = self.index.schema
        self._writer: Any = None
        self.dirty = False  # changes not committed yet

    # -- writing -------------------------------------------------------------------------
    def writer(self, heap: int = APPLY_HEAP, threads: int = 1) -> Any:
        if self._writer is None:
            self._writer = self.index.writer(heap_size=heap, num_threads=threads)
        return self._writer

    def add(self, rows: Iterable[Row]) -> int:
        import tantivy

        w = self.writer()
        n = 0
        for seq, content, key, kind in rows:
            doc = tantivy.Document()
            doc.add_unsigned("seq", seq)  # explicitly: a Python int would be an i64
            doc.add_text("vis", key)
            doc.add_text("kind", kind or "")
            doc.add_text("content", content)
            w.add_document(doc)
            n += 1
        self.dirty = self.dirty or n > 0
        return n

    def delete(self, seq: int) -> None:
        import tantivy

        # By a term query: delete_documents_by_term makes a Python int an i64 term, which never
        # matches the u64 field (nothing is deleted, and the row is then indexed twice).
        self.writer().delete_documents_by_query(tantivy.Query.term_query(self.schema, "seq", seq))
        self.dirty = True

    def commit(self) -> None:
        """Make the changes durable and visible (tantivy replaces its meta.json atomically: a
        kill -9 leaves the last commit whole)."""
        if self.dirty and self._writer is not None:
            self._writer.commit()
            self.index.reload()
            self.dirty = False

    def close(self) -> None:
        """Commit, let merges finish and release the writer's lock."""
        self.commit()
        if self._writer is not None:
            self._writer.wait_merging_threads()
            self._writer = None
            self.index.reload()

    # -- reading -------------------------------------------------------------------------
    def docs(self) -> int:
        return int(self.index.searcher().num_docs)

    def search(self, query: Any, limit: int) -> list[tuple[int, float]]:
        """(seq, score) of the best ``limit`` documents for ``query``, best first."""
        searcher = self.index.searcher()
        hits = searcher.search(query, limit=limit, count=False).hits
        if not hits:
            return []
        seqs: list[Any] = searcher.fast_field_values("seq", [address for _, address in hits])
        return [(int(s), float(score)) for (score, _), s in zip(hits, seqs, strict=True)]


def build(number: int, path: Path, rows: Iterable[Row]) -> Shard:
    """A new shard in ``path`` (which must not exist) holding ``rows``, committed and merged."""
    shard = Shard(number, path)
    shard.writer(BUILD_HEAP, BUILD_THREADS)
    shard.add(rows)
    shard.dirty = True  # an empty shard commits too: its meta.json names the schema
    shard.close()
    return shard


class Queries:
    """Turns a search's words and filters into a tantivy query (per schema: all shards share one)."""

    def __init__(self) -> None:
        self.an = analyzer()

    def tokens(self, words: Sequence[str]) -> list[str] | None:
        """The index terms of a query's words, or None when a word has none (longer than
        MAX_TOKEN, say: the shards dropped it, the store kept it)."""
        out: list[str] = []
        for word in words:
            found = self.an.analyze(word)
            if not found:
                return None
            for token in found:
                if token not in out:
                    out.append(token)
        return out

    def query(self, schema: Any, tokens: Sequence[str], keys: Sequence[str], kind: str | None) -> Any:
        """Any of ``tokens`` in the content (scored by BM25), and (not scored) a scope key of
        ``keys`` and, when given, ``kind``."""
        import tantivy

        q = tantivy.Query
        should, must = tantivy.Occur.Should, tantivy.Occur.Must
        words = q.boolean_query([(should, q.term_query(schema, "content", t)) for t in tokens])
        scope = q.boolean_query([(should, q.term_query(schema, "vis", k)) for k in keys])
        clauses = [(must, words), (must, q.const_score_query(scope, 0.0))]
        if kind:
            clauses.append((must, q.const_score_query(q.term_query(schema, "kind", kind), 0.0)))
        return q.boolean_query(clauses)


def wipe(path: Path) -> None:
    """Overwrite every file under ``path`` with zeros (fsync'd), then remove the directory: a
    shard rebuilt after an erasure leaves no copy of the erased words in the old files."""
    import shutil

    if not path.exists():
        return
    for file in path.rglob("*"):
        if not file.is_file() or file.is_symlink():
            continue
        try:
            size = file.stat().st_size
            fd = os.open(file, os.O_WRONLY)
        except OSError:
            continue
        try:
            block = b"\0" * (1 << 20)
            done = 0
            while done < size:
                done += os.write(fd, block[: min(len(block), size - done)])
            os.fsync(fd)
        finally:
            os.close(fd)
    shutil.rmtree(path, ignore_errors=True)
