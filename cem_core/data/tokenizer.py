"""Tokenizers by name (`data.tokenizer`): byte, bpe, hf. Used by `prepare_data` (`cemctl launch`).

- `byte`: UTF-8 bytes 0..255 and end-of-document 256 (vocab 257).
- `bpe`: byte-level BPE trained locally with Hugging Face `tokenizers` on the
  TRAIN split only; exactly `data.bpe_vocab_size` ids including the
  end-of-document token `<|endoftext|>` (id 0). If the corpus is too small to
  learn that many merges, the id count is still reported as `bpe_vocab_size`
  (the unused ids are never produced). Cached as JSON under
  `<cache>/tokenizers/`, keyed by the training corpus identity + settings; the
  file is written once (lock + temp + rename) and reused by every run.
- `hf`: a pretrained tokenizer: from a local file `data.tokenizer_path` (a Hugging
  Face `tokenizer.json`, a folder holding one, or a SentencePiece `.model` such as
  the Llama tokenizer an offline cluster keeps on disk), else loaded by name
  (`data.hf_tokenizer`, the Llama tokenizer for the paper's SlimPajama path; a
  name that is a local path works too). Its EOS token is the end-of-document
  token, no BOS is added. A hub name needs the hub or its local cache. The model
  is built with `LLAMA_VOCAB_SIZE` ids unless `model.vocab_size` says otherwise;
  a tokenizer with more ids is rejected.

`cem_core.variants.TOKENIZERS` is the registry (every builder takes
`(data_cfg, cache_root, corpus_identity, train_texts)`); `build_tokenizer`
rejects unknown names with a `ConfigError` that lists the known ones. The vocab sizes agree with
`cem_core.config.tokenizer_vocab_size`, which the model is built with.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol

import numpy as np

from cem_core.config import BYTE_VOCAB_SIZE, DataConfig
from cem_core.errors import CemError, ConfigError
from cem_core.runfiles.files import atomic_write_bytes
from cem_core.runfiles.lock import file_lock

BPE_SPECIAL = "<|endoftext|>"
BPE_SETTINGS_VERSION = 1  # bump when the BPE training recipe changes (changes cache keys)
# Number of times a BPE tokenizer was trained in this process (tests check the cache with it).
BPE_TRAIN_CALLS = 0


class HubUnavailable(CemError):
    """The Hugging Face hub (or its local cache) could not provide a dataset or tokenizer."""


def hub_error(what: str, exc: BaseException) -> HubUnavailable:
    cause = " ".join(str(exc).split())[:160] or type(exc).__name__
    return HubUnavailable(
        f"cannot load {what} from the Hugging Face hub ({type(exc).__name__}: {cause}); "
        "set data.corpus='builtin' (with data.tokenizer='byte' or 'bpe') to use the built-in corpus, which needs no network"
    )


class Tokenizer(Protocol):
    name: str
    vocab_size: int
    eod_id: int
    identity: str  # part of cache keys
    num_ids: int  # ids the tokenizer actually produces (<= vocab_size)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]: ...

    def decode(self, ids: Iterable[int]) -> str: ...


class ByteTokenizer:
    name = "byte"
    vocab_size = BYTE_VOCAB_SIZE
    eod_id = 256
    identity = "byte"
    num_ids = BYTE_VOCAB_SIZE

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """Wraps a `tokenizers.Tokenizer` (trained BPE or pretrained)."""

    def __init__(self, tok, *, name: str, vocab_size: int, eod_id: int, identity: str) -> None:
        self.tok = tok
        self.name = name
        self.vocab_size = vocab_size
        self.eod_id = eod_id
        self.identity = identity
        self.num_ids = tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> np.ndarray:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        encs = self.tok.encode_batch(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int64) for e in encs]

    def decode(self, ids: Iterable[int]) -> str:
        return self.tok.decode([int(i) for i in ids if int(i) != self.eod_id], skip_special_tokens=False)


BPE_MAX_WORD_CHARS = 256  # the trainer learns from words cut to this length (a text without spaces is one word)
_LONG_WORD = None


def bounded_words(text: str) -> str:
    """`text` with every run of more than BPE_MAX_WORD_CHARS non-space characters cut by a space (training only).

    The BPE trainer's work grows with the length of a word times the merges: one long document without
    whitespace (a minified file, a base64 blob) kept it busy for minutes. Ordinary words are far shorter, so
    the merges learned from ordinary text are unchanged; tokenizing is never affected.
    """
    global _LONG_WORD
    if _LONG_WORD is None:
        import re

        _LONG_WORD = re.compile(r"\S{%d}" % BPE_MAX_WORD_CHARS)
    return _LONG_WORD.sub(lambda m: m.group(0) + " ", text)


def train_bpe(texts: Callable[[], Iterator[str]], vocab_size: int):
    """Train a byte-level BPE on `texts()` with exactly `vocab_size` ids at most (EOD = id 0); words longer than
    BPE_MAX_WORD_CHARS are cut for the training (`bounded_words`), so its time stays bounded."""
    global BPE_TRAIN_CALLS
    from tokenizers import Tokenizer as HfTok, decoders, models, pre_tokenizers, trainers

    tok = HfTok(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[BPE_SPECIAL],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((bounded_words(t) for t in texts()), trainer=trainer)
    BPE_TRAIN_CALLS += 1
    return tok


def byte_tokenizer(data_cfg: DataConfig, cache_root: Path | None = None, corpus_identity: str = "",
                   train_texts: Callable[[], Iterator[str]] | None = None) -> ByteTokenizer:
    return ByteTokenizer()


def bpe_tokenizer(
    data_cfg: DataConfig, cache_root: Path, corpus_identity: str, train_texts: Callable[[], Iterator[str]] | None
) -> HFTokenizer:
    """The BPE tokenizer for this corpus: loaded from the cache or trained on `train_texts()` once."""
    from tokenizers import Tokenizer as HfTok

    vocab_size = data_cfg.bpe_vocab_size
    identity = tokenizer_identity(data_cfg, corpus_identity)
    path = cache_root / "tokenizers" / f"{identity}.json"
    if not path.exists():
        if train_texts is None:
            raise ValueError("the bpe tokenizer needs train_texts to train on when it is not cached")
        path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(path.with_suffix(".lock"), make_parents=True):
            if not path.exists():
                tok = train_bpe(train_texts, vocab_size)
                atomic_write_bytes(path, tok.to_str().encode("utf-8"))
    tok = HfTok.from_file(str(path))
    if tok.get_vocab_size() > vocab_size:  # never: the trainer caps the size
        raise CemError(f"{path}: BPE has {tok.get_vocab_size()} ids, more than data.bpe_vocab_size={vocab_size}")
    return HFTokenizer(tok, name="bpe", vocab_size=vocab_size, eod_id=tok.token_to_id(BPE_SPECIAL), identity=identity)  # type: ignore[arg-type]


class SentencePieceTokenizer:
    """A SentencePiece `.model` file (e.g. the Llama tokenizer on disk); EOS is the end-of-document token."""

    name = "hf"

    def __init__(self, path: Path, identity: str) -> None:
        try:
            import sentencepiece as spm
        except ImportError:
            raise CemError(f"data.tokenizer_path: {path} is a SentencePiece model; it needs the sentencepiece package "
                           "(pip install '.[hf]')") from None
        self.sp = spm.SentencePieceProcessor(model_file=str(path))
        self.num_ids = self.vocab_size = int(self.sp.get_piece_size())
        self.eod_id = int(self.sp.eos_id())
        if self.eod_id < 0:
            raise CemError(f"data.tokenizer_path: {path} has no end-of-sequence id")
        self.identity = identity

    def encode(self, text: str) -> np.ndarray:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(ids, dtype=np.int64) for ids in self.sp.encode(texts)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode([int(i) for i in ids if int(i) != self.eod_id])


def hf_tokenizer(data_cfg: DataConfig, cache_root: Path | None = None, corpus_identity: str = "",
                 train_texts: Callable[[], Iterator[str]] | None = None) -> Tokenizer:
    """A pretrained tokenizer from `data.tokenizer_path` or by name: EOS is the end-of-document token."""
    from tokenizers import Tokenizer as HfTok

    if data_cfg.tokenizer_path:
        local = _local_tokenizer_file(data_cfg.tokenizer_path)
        if local is None:
            raise ConfigError("data.tokenizer_path", f"no tokenizer file at {data_cfg.tokenizer_path} (a tokenizer.json, "
                              "a folder holding one, or a SentencePiece .model)", value=data_cfg.tokenizer_path)
        if local.suffix == ".model":
            return SentencePieceTokenizer(local, tokenizer_identity(data_cfg, ""))
        name = str(local)
    else:
        name = data_cfg.hf_tokenizer
        local = _local_tokenizer_file(name)
    try:
        if local is not None:  # a tokenizer.json already on disk (clusters without internet)
            tok = HfTok.from_file(str(local))
        else:
            tok = HfTok.from_pretrained(name)
    except Exception as exc:  # offline, unknown repo, hub down: one line naming the fix
        raise hub_error(f"tokenizer {name!r}", exc) from None
    eod = None
    for candidate in ("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>"):
        eod = tok.token_to_id(candidate)
        if eod is not None:
            break
    if eod is None:
        raise CemError(f"data.hf_tokenizer: {name!r} has no end-of-sequence token (looked for </s>, <|endoftext|>)")
    vocab = tok.get_vocab_size(with_added_tokens=True)
    return HFTokenizer(tok, name="hf", vocab_size=vocab, eod_id=eod, identity=tokenizer_identity(data_cfg, ""))


def tokenizer_identity(data_cfg: DataConfig, corpus_identity: str) -> str:
    """Cheap cache-key identity of the tokenizer (no training, no loading)."""
    if data_cfg.tokenizer == "bpe":
        vocab_size = data_cfg.bpe_vocab_size
        key = hashlib.sha256(f"bpe|v{BPE_SETTINGS_VERSION}|{vocab_size}|{corpus_identity}".encode()).hexdigest()[:16]
        return f"bpe-{vocab_size}-{key}"
    if data_cfg.tokenizer == "hf":
        local = _local_tokenizer_file(data_cfg.tokenizer_path or data_cfg.hf_tokenizer)
        if local is not None:
            return f"hf-file-{hashlib.sha256(local.read_bytes()).hexdigest()[:16]}"
        return f"hf-{data_cfg.hf_tokenizer}"
    return data_cfg.tokenizer


def _local_tokenizer_file(name: str) -> Path | None:
    local = Path(name).expanduser()
    if local.is_dir():
        local = local / "tokenizer.json"
    return local if local.is_file() else None


def build_tokenizer(
    data_cfg: DataConfig,
    cache_root: Path | str,
    corpus_identity: str = "",
    train_texts: Callable[[], Iterator[str]] | None = None,
) -> Tokenizer:
    """The tokenizer named by `data_cfg.tokenizer` (BPE is trained on `train_texts()` if not cached)."""
    from cem_core.variants import TOKENIZERS

    return TOKENIZERS.get(data_cfg.tokenizer)(data_cfg, Path(cache_root), corpus_identity, train_texts)


def default_cache_root(data_cfg: DataConfig) -> Path:
    """`data.cache_dir`, else `$CEMCTL_CACHE`, else `~/.cache/cemctl`; a leading `~` means the home folder in
    all three, for every command (prepare, info, clean, the trainer), never a folder named `~`."""
    root = data_cfg.cache_dir or os.environ.get("CEMCTL_CACHE") or os.path.join("~", ".cache", "cemctl")
    return Path(os.path.expanduser(root))
