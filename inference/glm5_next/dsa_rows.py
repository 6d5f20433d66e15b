"""GLM-5.3-Flash's per-token DSA rows as DsaAttention's `state`: the MLA latent on every DSA layer,
the indexer key and pool-gate logits on full indexer layers. The dense slot pool (state_pool.py)
and the engine's paged cache (paged_cache.py) hold them in the same buffers and differ only in
where a sequence's row t lives, which their `DsaRows` subclass says (`_write`)."""

from __future__ import annotations

import torch


class DsaRowStore:
    """Owner of the buffers: latent [n_dsa, ...], index_keys / index_gates [n_full, ...], the last
    dim per row; dsa_index / full_index map a model layer to its buffer row."""

    latent: torch.Tensor
    index_keys: torch.Tensor
    index_gates: torch.Tensor
    dsa_index: dict[int, int]
    full_index: dict[int, int]

    @property
    def kv_bytes_per_token(self) -> int:
        per = self.latent[:, 0, 0].numel() * self.latent.element_size()
        return per + 2 * self.index_keys[:, 0, 0].numel() * self.index_keys.element_size()


class DsaRows:
    """One layer's rows for one forward of right-padded rows [B, T]: `append` writes each row's
    `lengths` valid new tokens from `starts` and returns every sequence's rows up to the batch's
    end (positions past a row's end are never visible to its valid queries: the indexer and
    attention masks are causal)."""

    def __init__(self, store: DsaRowStore, layer: int, starts: torch.Tensor, lengths: torch.Tensor):
        self.store, self.layer, self.starts, self.lengths = store, layer, starts, lengths
        self.end = int((starts + lengths).max())

    def _write(self, buf: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """rows [B, T, D] -> written into `buf`; returns [B, end, D]."""
        raise NotImplementedError

    def _positions(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(position of each padded row entry [B, T], which are valid new tokens [B, T])."""
        b, t = rows.shape[:2]
        steps = torch.arange(t, device=rows.device).view(1, t)
        return self.starts.view(b, 1) + steps, steps < self.lengths.view(b, 1)

    def append(self, latent, keys, gates, lengths=None):
        s = self.store
        latent = self._write(s.latent[s.dsa_index[self.layer]], latent)
        if keys is None:
            return latent, None, None
        j = s.full_index[self.layer]
        return latent, self._write(s.index_keys[j], keys), self._write(s.index_gates[j], gates)
