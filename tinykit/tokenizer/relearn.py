"""A trained BPE/WordPiece/Unigram vocabulary relearned deterministically.

The `tokenizers` trainers break ties in hash-map order (the Unigram one runs in parallel too),
so two trainings on one corpus can differ; a content-addressed build needs the same bytes every
time. `canonical` keeps what the trainer decided that does not depend on tie order (size,
special tokens, alphabet, pipeline) and learns the rest again with `_learn`.
"""

from __future__ import annotations

import heapq
from collections import Counter


def canonical(tj: dict, backend, corpus: list[str]) -> dict:
    """Relearn a trained vocabulary with ties broken by the symbols themselves, not hash order.

    The `tokenizers` trainers break equal counts by ids they assign in hash-map order (and the
    Unigram trainer runs in parallel), so two trainings on one corpus can differ. This keeps the
    trained vocabulary's size, special tokens, alphabet and word splitting, and learns its other
    entries again with deterministic BPE merges: BPE keeps the merges, WordPiece the merged
    tokens, Unigram the merged pieces scored by merge order.
    """
    model = tj["model"]
    model_type = model["type"]  # the tokenizers model: BPE, WordPiece or Unigram
    prefix = model.get("continuing_subword_prefix") or ""
    suffix = model.get("end_of_word_suffix") or ""
    special = {t["content"] for t in tj.get("added_tokens", [])} | {model.get("unk_token")}
    if model_type == "Unigram":
        tokens = [piece for piece, _ in model["vocab"]]
        if model.get("unk_id") is not None:
            special.add(tokens[model["unk_id"]])
    else:
        tokens = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    alphabet = {t for t in tokens if len(t.removeprefix(prefix).removesuffix(suffix)) <= 1}
    base = [t for t in tokens if t in special] + sorted(alphabet - special)
    merges, new = _learn(_words(backend, corpus, prefix, suffix), len(tokens) - len(base), prefix)
    vocab = list(dict.fromkeys(base + new))
    if model_type == "BPE":
        model = {**model, "vocab": {t: i for i, t in enumerate(vocab)}, "merges": merges}
    elif model_type == "WordPiece":
        model = {**model, "vocab": {t: i for i, t in enumerate(vocab)}}
    elif model_type == "Unigram":
        scores = dict(model["vocab"])
        n = len(vocab)
        model = {
            **model,
            "vocab": [
                [t, scores[t] if t in special else -1.0 - i / n if t in new else -3.0]
                for i, t in enumerate(vocab)
            ],
            "unk_id": None if model.get("unk_id") is None else vocab.index(tokens[model["unk_id"]]),
        }
    else:
        return tj
    ids = {t: i for i, t in enumerate(vocab)}
    tj["model"] = model
    tj["added_tokens"] = [
        {**t, "id": ids.get(t["content"], t["id"])} for t in tj.get("added_tokens", [])
    ]
    return tj


def _words(backend, corpus: list[str], prefix: str, suffix: str) -> Counter:
    """The corpus as the tokenizer splits it: words as symbol tuples, with their counts."""
    words: Counter[tuple[str, ...]] = Counter()
    for text in corpus:
        text = backend.normalizer.normalize_str(text) if backend.normalizer else text
        pieces = (
            backend.pre_tokenizer.pre_tokenize_str(text)
            if backend.pre_tokenizer
            else [(text, None)]
        )
        for word, _ in pieces:
            if word:
                symbols = [word[0], *(prefix + c for c in word[1:])]
                symbols[-1] += suffix
                words[tuple(symbols)] += 1
    return words


def _learn(words: Counter, n: int, prefix: str) -> tuple[list[list[str]], list[str]]:
    """`n` BPE merges, the most frequent pair first and ties to the smallest pair.

    Counted incrementally: a merge recounts only the pairs around its occurrences, and a heap
    of (-count, pair), stale entries skipped, gives the next best pair: the result of a full
    recount at every step, in a fraction of the time. Plain dicts, not Counters: Counter's
    missing-key and delete hooks run in Python, for a third of the time."""
    symbols = [list(word) for word in words]
    counts = list(words.values())
    pairs: dict[tuple[str, str], int] = {}
    where: dict[tuple[str, str], set[int]] = {}  # the words that may hold a pair
    for i, word in enumerate(symbols):
        for pair in zip(word, word[1:], strict=False):
            pairs[pair] = pairs.get(pair, 0) + counts[i]
            where.setdefault(pair, set()).add(i)
    heap = [(-count, pair) for pair, count in pairs.items()]
    heapq.heapify(heap)
    merges: list[list[str]] = []
    new: list[str] = []
    while len(merges) < n and heap:
        negative, best = heapq.heappop(heap)
        if pairs.get(best) != -negative:
            continue  # stale: the pair's count changed since this entry was pushed
        token = best[0] + best[1].removeprefix(prefix)
        merges.append(list(best))
        new.append(token)
        changed: set[tuple[str, str]] = set()
        for i in where.pop(best):  # any order: counts are sums, the heap orders the pairs
            merged = _merge(symbols[i], best, token, counts[i], pairs, changed)
            if merged is not None:
                symbols[i], added = merged
                for pair in added:
                    where.setdefault(pair, set()).add(i)
        for pair in changed:
            if pairs[pair] > 0:
                heapq.heappush(heap, (-pairs[pair], pair))
            else:
                del pairs[pair]
    return merges, new


def _merge(
    old: list[str],
    pair: tuple[str, str],
    token: str,
    count: int,
    pairs: dict[tuple[str, str], int],
    changed: set[tuple[str, str]],
) -> tuple[list[str], list[tuple[str, str]]] | None:
    """`old` with `pair` merged left to right into `token`, and the pairs that came (None
    where it holds none). The pairs that touch a merge are counted out of `pairs` (in `old`)
    and back in (in the result), each once, and noted in `changed`."""
    first, second = pair
    last = len(old) - 1
    out: list[str] = []
    placed: list[int] = []  # where `token` went in `out`
    done = -1  # the last position whose pair was counted (positions only grow)
    start = 0
    while True:
        try:
            j = old.index(first, start, last)
        except ValueError:
            break
        if old[j + 1] != second:
            out += old[start : j + 1]
            start = j + 1
            continue
        for k in (j - 1, j, j + 1):
            if k > done and 0 <= k < last:
                gone = (old[k], old[k + 1])
                pairs[gone] -= count
                changed.add(gone)
                done = k
        out += old[start:j]
        placed.append(len(out))
        out.append(token)
        start = j + 2
    if not placed:
        return None
    out += old[start:]
    last = len(out) - 1
    added = []
    done = -1
    for q in placed:
        for k in (q - 1, q):
            if k > done and 0 <= k < last:
                came = (out[k], out[k + 1])
                pairs[came] = pairs.get(came, 0) + count
                changed.add(came)
                added.append(came)
                done = k
    return out, added
