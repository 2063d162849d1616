"""Data layer: built-in corpus, tokenizers, HF/SlimPajama streaming, packing, memmap cache (every training run).

    from cem_core.data import prepare_data, PackedData
    pd = prepare_data(run_cfg.data, min_train_tokens=run_cfg.train.max_tokens)
    pd.vocab_size, pd.eod_id, pd.corpus_hash
    pd.tokens("train")                      # np.memmap of token ids (uint16 / uint32)
    pd.num_sequences("val", seq_len)        # (len(tokens) - 1) // seq_len
    pd.sequences("val", seq_len, indices)   # int64 [n, seq_len + 1]

Modules: `builtin_corpus` (the no-network default corpus), `sources` (corpora by
name and the split-by-document rule), `tokenizer` (tokenizers by name),
`packing` (`PackedData`, the on-disk format), `cache` (locks and atomic
writes), `prepare` (`prepare_data`).
"""

from cem_core.data.packing import PackedData
from cem_core.data.prepare import DataNotPrepared, data_for_run, find_prepared, prepare_data
from cem_core.data.sources import SPLITS, split_of
from cem_core.data.tokenizer import HubUnavailable, build_tokenizer

__all__ = [
    "prepare_data",
    "data_for_run",
    "find_prepared",
    "DataNotPrepared",
    "PackedData",
    "SPLITS",
    "split_of",
    "HubUnavailable",
    "build_tokenizer",
]
