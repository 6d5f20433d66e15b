"""Draft verification: whatever the drafts, greedy output is the target's; correct drafts are
accepted and save steps. The random checkpoint's MTP layer drafts almost nothing correctly, so
here the drafts come from the known continuation (optionally corrupted)."""

from __future__ import annotations

from inference.engine import Engine, EngineConfig, GenerateRequest, SamplingParams

from .conftest import make_prompt

K = 3


class ContinuationDrafter:
    """Proposes the true greedy continuation, with every `wrong_every`-th draft replaced."""

    def __init__(self, truth: dict[str, list[int]], wrong_every: int = 0):
        self.truth = truth
        self.wrong_every = wrong_every
        self.proposed = 0

    def step(self, entries) -> None:
        for e in entries:
            seq = e.seq
            seq.draft_tokens = []
            if not seq.in_decode:
                continue
            room = seq.params.max_tokens - seq.num_output - 1
            drafts = self.truth[seq.request_id][seq.num_output:seq.num_output + min(K, room)]
            for i in range(len(drafts)):
                self.proposed += 1
                if self.wrong_every and self.proposed % self.wrong_every == 0:
                    drafts[i] = (drafts[i] + 1) % 400
            seq.draft_tokens = drafts


def _run(ckpt, truth, drafter=None):
    eng = Engine(ckpt, EngineConfig(dtype="float32", kv_budget_tokens=1024, page_size=16,
                                    latent_norm_eps=1e-6, num_speculative_tokens=K))
    if drafter is not None:
        eng.drafter = drafter
    params = SamplingParams(temperature=0.0, max_tokens=13, ignore_eos=True)
    prompts = {rid: make_prompt(60 + i, 20 + 9 * i) for i, rid in enumerate(truth)}
    results = eng.generate([GenerateRequest(prompt_ids=p, params=params, request_id=rid) for rid, p in prompts.items()])
    return eng, results, prompts


def test_correct_drafts_are_all_accepted(engine_checkpoint, hf_greedy):
    rids = ["a", "b"]
    prompts = {rid: make_prompt(60 + i, 20 + 9 * i) for i, rid in enumerate(rids)}
    truth = {rid: hf_greedy(tuple(p), 13) for rid, p in prompts.items()}
    eng, results, _ = _run(engine_checkpoint, truth, ContinuationDrafter(truth))
    for rid, r in zip(rids, results):
        assert r.token_ids == truth[rid]
        assert r.usage.spec_draft_tokens == r.usage.spec_accepted_tokens == 9
    # 1 prefill step (token 1), then 3 verify steps of 3 accepted drafts + 1 target token each.
    assert eng.num_steps == 4


def test_wrong_drafts_are_rejected_without_changing_output(engine_checkpoint, hf_greedy):
    rids = ["a", "b"]
    prompts = {rid: make_prompt(60 + i, 20 + 9 * i) for i, rid in enumerate(rids)}
    truth = {rid: hf_greedy(tuple(p), 13) for rid, p in prompts.items()}
    _, results, _ = _run(engine_checkpoint, truth, ContinuationDrafter(truth, wrong_every=2))
    for rid, r in zip(rids, results):
        assert r.token_ids == truth[rid]
        assert 0 < r.usage.spec_accepted_tokens < r.usage.spec_draft_tokens


def test_mtp_drafter_reports_acceptance(engine_checkpoint, hf_greedy):
    truth = {"a": [], "b": []}
    _, results, prompts = _run(engine_checkpoint, truth)
    for rid, r in zip(truth, results):
        assert r.token_ids == hf_greedy(tuple(prompts[rid]), 13)
        assert r.usage.spec_draft_tokens > 0
        assert 0 <= r.usage.spec_accepted_tokens <= r.usage.spec_draft_tokens


def test_index_share_for_mtp_iteration_skips_the_indexer_on_later_drafts(tmp_path):
    """GLM-5.2/5.3 configs: drafts 2..k reuse the first draft's MTP selection. Output stays the
    target's greedy output; the MTP indexer runs once per drafting round, not once per draft."""
    from inference.random_checkpoint import write_random_checkpoint

    ckpt = write_random_checkpoint(tmp_path / "ckpt", preset="tiny", seed=0,
                                   overrides=dict(index_share_for_mtp_iteration=True))
    cfg = dict(dtype="float32", kv_budget_tokens=1024, page_size=16, latent_norm_eps=1e-6)
    params = SamplingParams(temperature=0.0, max_tokens=13, ignore_eos=True)
    prompts = [make_prompt(80 + i, 20 + 9 * i) for i in range(2)]  # longer than index_topk
    plain = Engine(ckpt, EngineConfig(**cfg)).generate([GenerateRequest(prompt_ids=p, params=params) for p in prompts])

    eng = Engine(ckpt, EngineConfig(**cfg, num_speculative_tokens=K))
    assert eng.drafter.share_selection
    indexer = eng.model.model.layers[eng.model_config.num_hidden_layers].self_attn.indexer
    counts = {"indexer": 0, "mtp_passes": 0}
    real_indexer, real_run = indexer.forward, eng.runner.run_mtp

    def counted_indexer(*a, **k):
        counts["indexer"] += 1
        return real_indexer(*a, **k)

    def counted_run(*a, **k):
        counts["mtp_passes"] += 1
        return real_run(*a, **k)

    indexer.forward, eng.runner.run_mtp = counted_indexer, counted_run
    results = eng.generate([GenerateRequest(prompt_ids=p, params=params) for p in prompts])
    assert [r.token_ids for r in results] == [r.token_ids for r in plain]
    assert counts["mtp_passes"] > counts["indexer"] > 0  # chained drafts ran without it
