"""The SQL of recall's keyword index in PostgreSQL (``lexical_docs``, ``lexical_stats`` and
``lexical_postings``, migrations 5 to 7), for `PostgresLexicalIndex`.

Rows belong to the log's generation and go with the session (foreign keys) and
with `delete_messages` / `replace_message` (same transaction). How the rows
encode documents and postings is in `convmem._stores.postgres.postings`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .postings import (
    POSTINGS_BLOCK_BITS,
    SEPARATOR,
    LexicalMatches,
    _index_lock,
    decode_postings,
    document_terms,
    encode_postings,
    lexical_tag,
)
from .sql import SchemaSql, _check_id, _Operation, _Sql


class LexicalQueries(SchemaSql):
    """Reads and writes of the keyword index's tables."""

    def lexical_stored(
        self, session_id: str, kind: str, doc_ids: Sequence[int] | None
    ) -> _Operation[dict[int, tuple[bytes, int]]]:
        """(digest, size) of the session's `kind` documents of its current generation: of
        `doc_ids`, or all of them (None)."""
        _check_id(session_id, "session_id")
        s = self.s
        text = f"""
            SELECT d.doc_id, d.digest, d.size FROM {s}.sessions AS s
            JOIN {s}.lexical_docs AS d
              ON d.session_id = s.session_id AND d.generation = s.generation AND d.kind = %s
            WHERE s.session_id = %s"""
        params: tuple[Any, ...] = (kind, session_id)
        if doc_ids is not None:
            text += " AND d.doc_id = ANY(%s::bigint[])"
            params += (list(doc_ids),)
        rows = yield _Sql(text, params)
        return {int(r[0]): (bytes(r[1]), int(r[2])) for r in rows}

    def write_lexical(
        self,
        session_id: str,
        kind: str,
        generation: str | None,
        deletes: Sequence[int],
        docs: Sequence[tuple[int, bytes, int, str, int, str | None]],
    ) -> _Operation[bool]:
        """Run in a transaction: delete `deletes` and write `docs` (doc id, digest, size, terms
        joined by ``\\x1f``, length, repeats) while the session is at `generation`; False
        (nothing written) otherwise. The index's totals (``lexical_stats``) and postings
        (``lexical_postings``) change by exactly what the rows did, in the same transaction.

        A stored document of the same generation that is longer (written by a server that read
        further) stays. The terms become a tsvector with `array_to_tsvector`, with the index's
        own lexeme (`lexical_tag`): no text is parsed. Writers of one index take turns (an
        advisory lock, after the session row's key-share lock), so each edits the postings
        the previous one left.
        """
        _check_id(session_id, "session_id")
        s = self.s
        rows = yield _Sql(
            f"SELECT 1 FROM {s}.sessions WHERE session_id = %s AND generation IS NOT DISTINCT FROM %s "
            "FOR KEY SHARE",
            (session_id, generation),
        )
        if not rows:
            return False
        yield _Sql("SELECT pg_advisory_xact_lock(%s)", (_index_lock(s, session_id, kind),))
        # (doc id, length, old lexemes) of each row deleted; doc id -> length of each written.
        removed: list[tuple[Any, ...]] = []
        if deletes:
            removed += yield _Sql(
                f"DELETE FROM {s}.lexical_docs WHERE session_id = %s AND kind = %s "
                "AND doc_id = ANY(%s::bigint[]) RETURNING doc_id, length, tsvector_to_array(terms), repeats",
                (session_id, kind, list(deletes)),
            )
        written: dict[int, int] = {}
        todo = list(docs)
        first = True
        while todo:
            ids = [d[0] for d in todo]
            # Replaced rows go first, so the totals see their old length; a row another writer
            # holds is waited for, then judged as it is after that writer.
            gone = yield _Sql(
                f"""
                DELETE FROM {s}.lexical_docs AS known
                USING unnest(%s::bigint[], %s::integer[]) AS u(doc_id, size)
                WHERE known.session_id = %s AND known.kind = %s AND known.doc_id = u.doc_id
                  AND (known.generation IS DISTINCT FROM %s OR known.size <= u.size)
                RETURNING known.doc_id, known.length, tsvector_to_array(known.terms), known.repeats""",
                (ids, [d[2] for d in todo], session_id, kind, generation),
            )
            stored = yield _Sql(
                f"""
                INSERT INTO {s}.lexical_docs
                    (session_id, kind, doc_id, generation, digest, size, terms, length, repeats)
                SELECT %s, %s, u.doc_id, %s, u.digest, u.size,
                       array_to_tsvector(array_append(string_to_array(u.terms, E'\\x1f'), %s)),
                       u.length, u.repeats
                FROM unnest(%s::bigint[], %s::bytea[], %s::integer[], %s::text[], %s::integer[], %s::text[])
                     AS u(doc_id, digest, size, terms, length, repeats)
                ON CONFLICT (session_id, kind, doc_id) DO NOTHING
                RETURNING doc_id, length""",
                (
                    session_id,
                    kind,
                    generation,
                    lexical_tag(session_id, kind),
                    ids,
                    [d[1] for d in todo],
                    [d[2] for d in todo],
                    [d[3] for d in todo],
                    [d[4] for d in todo],
                    [d[5] for d in todo],
                ),
            )
            removed += gone
            written.update((int(r[0]), int(r[1])) for r in stored)
            # Not stored: a row this statement could not see yet (another writer's, now
            # committed) is judged once more; a row kept as longer stays.
            deleted = {int(r[0]) for r in gone}
            todo = [d for d in todo if d[0] not in written and (first or d[0] in deleted)]
            first = False
        documents = len(written) - len(removed)
        length = sum(written.values()) - sum(int(r[1]) for r in removed)
        if written or removed:
            yield _Sql(
                f"""
                INSERT INTO {s}.lexical_stats AS known (session_id, kind, documents, total_length)
                VALUES (%s, %s, %s, %s)
                ON CONFLICT (session_id, kind) DO UPDATE SET
                    documents = known.documents + EXCLUDED.documents,
                    total_length = known.total_length + EXCLUDED.total_length""",
                (session_id, kind, documents, length),
            )
            new_docs = {d[0]: d for d in docs if d[0] in written}
            yield from self._edit_postings(session_id, kind, generation, removed, new_docs, written)
        return True

    def _edit_postings(
        self,
        session_id: str,
        kind: str,
        generation: str | None,
        removed: Sequence[tuple[Any, ...]],
        docs: dict[int, tuple[int, bytes, int, str, int, str | None]],
        lengths: dict[int, int],
    ) -> _Operation[None]:
        """Take the `removed` rows (doc id, length, lexemes, repeats) out of their terms'
        postings and add the `docs` written: only the (term, block) rows they touch are read
        and written. A row of another generation is stale: it starts empty."""
        s = self.s
        gone: dict[tuple[str, int], set[int]] = {}
        for row in removed:
            doc = int(row[0])
            for term in document_terms(row[2], row[3]):
                gone.setdefault((term, doc >> POSTINGS_BLOCK_BITS), set()).add(doc)
        added: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        for doc, entry in docs.items():
            for term, count in document_terms(entry[3].split(SEPARATOR), entry[5]).items():
                added.setdefault((term, doc >> POSTINGS_BLOCK_BITS), []).append((doc, count, lengths[doc]))
        keys = sorted(set(gone) | set(added))
        if not keys:
            return
        # By the primary key: the terms, and the span of blocks (a flush's documents are mostly
        # consecutive seqs), filtered here. A join with the wanted (term, block) pairs was planned
        # as a scan of the session's rows, which grew with every flush.
        rows = yield _Sql(
            f"""
            SELECT p.term, p.block, p.postings FROM {s}.lexical_postings AS p
            WHERE p.session_id = %s AND p.kind = %s AND p.term = ANY(%s::text[])
              AND p.block BETWEEN %s AND %s AND p.generation IS NOT DISTINCT FROM %s""",
            (
                session_id,
                kind,
                sorted({k[0] for k in keys}),
                min(k[1] for k in keys),
                max(k[1] for k in keys),
                generation,
            ),
        )
        wanted = set(keys)
        current = {key: bytes(r[2]) for r in rows if (key := (str(r[0]), int(r[1]))) in wanted}
        writes: list[tuple[str, int, bytes]] = []
        empty: list[tuple[str, int]] = []
        for key in keys:
            out = set(gone.get(key, ())) | {doc for doc, _, _ in added.get(key, ())}
            kept = [e for e in decode_postings(current[key]) if e[0] not in out] if key in current else []
            entries = sorted(kept + added.get(key, []))
            if entries:
                writes.append((key[0], key[1], encode_postings(entries)))
            else:
                empty.append(key)
        if writes:
            yield _Sql(
                f"""
                INSERT INTO {s}.lexical_postings AS known (session_id, kind, term, block, generation, postings)
                SELECT %s, %s, u.term, u.block, %s, u.postings
                FROM unnest(%s::text[], %s::bigint[], %s::bytea[]) AS u(term, block, postings)
                ON CONFLICT (session_id, kind, term, block) DO UPDATE SET
                    generation = EXCLUDED.generation, postings = EXCLUDED.postings""",
                (
                    session_id,
                    kind,
                    generation,
                    [w[0] for w in writes],
                    [w[1] for w in writes],
                    [w[2] for w in writes],
                ),
            )
        if empty:
            yield _Sql(
                f"""
                DELETE FROM {s}.lexical_postings AS p USING unnest(%s::text[], %s::bigint[]) AS k(term, block)
                WHERE p.session_id = %s AND p.kind = %s AND p.term = k.term AND p.block = k.block""",
                ([k[0] for k in empty], [k[1] for k in empty], session_id, kind),
            )

    def lexical_matches(self, session_id: str, kind: str, terms: Sequence[str]) -> _Operation[LexicalMatches]:
        """The index's totals and the posting blocks of `terms` in the session's `kind`
        documents of its current generation (see `LexicalMatches`), in one query."""
        _check_id(session_id, "session_id")
        if not terms:
            raise ValueError("lexical_matches needs at least one term")
        s = self.s
        rows = yield _Sql(
            f"""
            SELECT st.documents, st.total_length, p.term, p.postings
            FROM {s}.sessions AS s
            JOIN {s}.lexical_stats AS st ON st.session_id = s.session_id AND st.kind = %s
            LEFT JOIN {s}.lexical_postings AS p
              ON p.session_id = s.session_id AND p.kind = st.kind AND p.generation = s.generation
             AND p.term = ANY(%s::text[])
            WHERE s.session_id = %s""",
            (kind, list(terms), session_id),
        )
        if not rows:
            return LexicalMatches(0, 0, {})
        postings: dict[str, list[bytes]] = {}
        for row in rows:
            if row[2] is not None:
                postings.setdefault(str(row[2]), []).append(bytes(row[3]))
        return LexicalMatches(int(rows[0][0]), int(rows[0][1]), postings)
