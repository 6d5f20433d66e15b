"""Grade the agent's diff as swebench's run_evaluation does, in a fresh offline container.

1. A fresh container from the instance image: its HEAD is what swebench's setup left (the base
   commit plus its setup commit); the agent's container's staged diff against it is the model patch.
2. Apply the model patch with swebench's own command list (GIT_APPLY_CMDS); none applies -> failed.
3. Run the TestSpec's eval script (`/bin/bash /eval.sh`: reset test files, apply the test patch,
   run the repository's test command between swebench's markers) and keep its log.
4. `get_eval_report` (swebench) on that log: its parser for the repository, its status mapping
   (PASSED and XFAIL pass), FAIL_TO_PASS / PASS_TO_PASS, resolved iff RESOLVED_FULL.
5. An unresolved instance counts against the agent only when the gold patch resolves it in the same
   image (checked once per image, `check_environment`); otherwise the environment is at fault and the
   trial is an `environment_error`, never a silent 0.
"""

from __future__ import annotations

import json
import shlex
import threading
from dataclasses import dataclass

from swebench.harness.grading import get_eval_report
from swebench.harness.run_evaluation import GIT_APPLY_CMDS
from swebench.harness.test_spec.test_spec import TestSpec

from evals.agents.predictions import PREDICTION_FILE
from evals.graders.base import Grade, GradeContext, VerifierCrashed
from evals.graders.swe_patch import extract_model_patch
from evals.swebench.offline_base import NOT_COMPARABLE
from evals.swebench.report import write_instance_logs
from evals.swebench.repo_source import RepoSource
from evals.swebench.specs import spec_for_instance

REPO_DIR = "/testbed"
OUTPUT_LIMIT = 64 * 1024 * 1024


@dataclass
class EvalRun:
    applied: bool
    apply_output: str
    log: str  # test_output.txt as run_instance writes it
    timed_out: bool


def _image_state(sb) -> tuple[str, list[str]]:
    """HEAD of the image's repository (swebench's setup commit) and the files untracked in it (build
    artefacts such as *.egg-info), which are not part of anyone's patch."""
    head = sb.exec_once(["bash", "-c", f"cd {REPO_DIR} && git rev-parse HEAD"], timeout=60)
    if head.exit_code != 0:
        raise VerifierCrashed(f"the instance image has no git repository at {REPO_DIR}: {head.output[-500:]}")
    untracked = sb.exec_once(["bash", "-c", f"cd {REPO_DIR} && git ls-files --others --exclude-standard"], timeout=60)
    return head.output.strip().splitlines()[-1], [p for p in untracked.output.splitlines() if p.strip()]


def run_eval_script(sb, spec: TestSpec, patch: str, timeout: float) -> EvalRun:
    """Steps 2-3 of run_instance, in sandbox `sb` (a fresh container of the instance image)."""
    output = ""
    if patch:
        sb.write_file("/tmp/patch.diff", patch.encode())
        for command in GIT_APPLY_CMDS:
            applied = sb.exec_once(["bash", "-c", f"cd {REPO_DIR} && {command} /tmp/patch.diff"], timeout=300)
            output = applied.output
            if applied.exit_code == 0:
                break
        else:
            return EvalRun(False, output, "", False)
    sb.write_file("/eval.sh", spec.eval_script.encode())
    run = sb.exec_once(["bash", "-c", "/bin/bash /eval.sh > /tmp/test_output.txt 2>&1"], timeout=timeout)
    log = sb.read_file("/tmp/test_output.txt").decode("utf-8", "replace")
    if run.timed_out:
        log += f"\n\nTimeout error: {timeout:.0f} seconds exceeded."
    return EvalRun(True, output, log, run.timed_out)


def swebench_report(spec: TestSpec, prediction: dict, log: str, tmp_dir) -> dict:
    """swebench's per-instance report (the report.json of run_instance) for this log."""
    path = tmp_dir / "test_output.txt"
    path.write_text(log, encoding="utf-8")
    return get_eval_report(test_spec=spec, prediction=prediction, test_log_path=str(path), include_tests_status=True)


_gold_cache: dict[tuple[str, str], tuple[bool, str]] = {}
_gold_lock = threading.Lock()


def _gold_resolves(ctx: GradeContext, spec: TestSpec, gold: str, image_id: str) -> tuple[bool, str]:
    """Does the gold patch resolve the instance in this image? Once per (image, instance)."""
    key = (image_id, spec.instance_id)
    with _gold_lock:
        if key in _gold_cache:
            return _gold_cache[key]
    check_dir = ctx.trial_dir / "gold-check"
    check_dir.mkdir(parents=True, exist_ok=True)
    with ctx.open_sandbox(ctx.env_image, workdir=REPO_DIR) as sb:
        run = run_eval_script(sb, spec, gold, ctx.timeout)
    if not run.applied:
        verdict = (False, "the gold patch does not apply")
    else:
        report = swebench_report(spec, {"instance_id": spec.instance_id, "model_patch": gold,
                                        "model_name_or_path": "gold"}, run.log, check_dir)[spec.instance_id]
        status = report.get("tests_status", {})
        failed = {k: status.get(k, {}).get("failure", []) for k in ("FAIL_TO_PASS", "PASS_TO_PASS")}
        verdict = (report["resolved"], "" if report["resolved"] else
                   f"with the gold patch: {json.dumps(failed)[:600]}" if status else "with the gold patch no test result was found")
    with _gold_lock:
        _gold_cache[key] = verdict
    return verdict


def grade(ctx: GradeContext) -> Grade:
    v = ctx.task.verifier
    spec = spec_for_instance(dict(v.instance), RepoSource(v.source), substitute=v.config.offline_substitute)
    iid = spec.instance_id
    given = ctx.trial_dir / PREDICTION_FILE  # --agent predictions: grade that patch as given
    prediction = json.loads(given.read_text(encoding="utf-8")) if given.exists() else None
    if prediction is not None and prediction["model_patch"] is None:
        report = {iid: {"patch_is_None": True, "patch_exists": False, "patch_successfully_applied": False,
                        "resolved": False}}
        return Grade(False, 0.0, {"swebench_report": report[iid], "model_patch": None,
                                         "model_name_or_path": prediction["model_name_or_path"]},
                     reason="the prediction's model_patch is null")
    with ctx.open_sandbox(ctx.env_image, workdir=REPO_DIR) as sb:
        if prediction is None:
            head, untracked = _image_state(sb)
            patch = extract_model_patch(ctx.sandbox, REPO_DIR, head, exclude=untracked)
            prediction = {"instance_id": iid, "model_name_or_path": None, "model_patch": patch}  # the run's agent
        patch = prediction["model_patch"]
        run = run_eval_script(sb, spec, patch, ctx.timeout)
    details: dict = {"model_patch": patch, "model_patch_bytes": len(patch.encode()), "image": ctx.env_image,
                     "comparable": not v.config.offline_substitute}
    if prediction["model_name_or_path"]:  # a predictions file's model; else the runner names the agent
        details["model_name_or_path"] = prediction["model_name_or_path"]
    if v.config.offline_substitute:
        details["not_comparable"] = NOT_COMPARABLE.format(base=v.config.substitute_base)
    (ctx.trial_dir / "model.patch").write_text(patch, encoding="utf-8")
    if not run.applied:
        report = {iid: {"patch_is_None": False, "patch_exists": True, "patch_successfully_applied": False,
                        "resolved": False}}
        write_instance_logs(ctx.trial_dir, spec, prediction, run.apply_output, report)
        details.update(apply_failed=1, swebench_report=report[iid])
        return Grade(False, 0.0, details, reason=f"patch does not apply: {run.apply_output.strip()[-800:]}")
    report = swebench_report(spec, prediction, run.log, ctx.trial_dir)
    write_instance_logs(ctx.trial_dir, spec, prediction, run.log, report)
    result = report[iid]
    status = result.get("tests_status", {})
    f2p, p2p = status.get("FAIL_TO_PASS", {}), status.get("PASS_TO_PASS", {})
    details.update(
        swebench_report=result,
        f2p=f"{len(f2p.get('success', []))}/{len(spec.FAIL_TO_PASS)}",
        p2p=f"{len(p2p.get('success', []))}/{len(spec.PASS_TO_PASS)}",
        f2p_failed=f2p.get("failure", []), p2p_failed=p2p.get("failure", []), tests_timed_out=run.timed_out,
    )
    gold = v.instance.get("patch") or ""
    image_id = ctx.builder.client.images.get(ctx.env_image).id if ctx.builder is not None else ctx.env_image
    if gold and patch.strip() == gold.strip():  # this run was the gold check: remember its verdict
        with _gold_lock:
            _gold_cache[(image_id, iid)] = (result["resolved"], "the model patch is the gold patch; " + (
                "swebench found no test results in its log" if not status else "its tests fail"))
    if result["resolved"]:
        return Grade(True, 1.0, details)
    if v.config.check_environment and gold:
        ok, why = _gold_resolves(ctx, spec, gold, image_id)
        if not ok:
            from evals.trial import InfraError  # the trial module is loaded: it is what called us

            raise InfraError("environment_error", f"{iid} is not resolved in {ctx.env_image} even by its gold patch ({why}): "
                                     "an environment failure, not the agent's", details=details)
    if run.timed_out:
        reason = "tests timed out"
    elif not status:
        reason = "no test results in the eval log (swebench found none to grade)"
    else:
        reason = f"{len(f2p.get('failure', []))} FAIL_TO_PASS and {len(p2p.get('failure', []))} PASS_TO_PASS tests failed"
    return Grade(False, 0.0, details, reason)
