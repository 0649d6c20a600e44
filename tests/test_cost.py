"""`plan --objective cost --clouds ...` (docs/search.md, "Cost across clouds").

The cheapest choice is checked against a brute-force recomputation: every catalog entry x GPU count, its speed
from the strategy search itself, cost = tokens / tokens/s x GPUs x price, the minimum among those within the
deadline. The catalogs here are fixtures with made-up prices (their sources say so); the project's catalog is
checked for its shape and its citations.
"""

from __future__ import annotations

import datetime as dt
import json
import math

import pytest
import yaml
from distributed import cli_in_process

from planner.cost.checked_prices import load_price_catalog
from planner.cost.cloud_search import gpu_counts
from planner.cost.preemption import preemption_cost
from planner.cost.prices import STALE_AFTER_DAYS

MODEL = "gpt2-medium"
BASE = ("plan", "--model", MODEL, "--objective", "cost", "--no-calibration")
MAX_GPUS = 16


def _entry(cloud, gpu, on_demand, *, spot=None, per_instance=8, date=None, **extra):
    entry = {
        "cloud": cloud,
        "region": "r1",
        "gpu": gpu,
        "instance": f"{gpu} x{per_instance} (fixture)",
        "gpus_per_instance": per_instance,
        "on_demand": on_demand,
        "derivation": "fixture: instance price / GPUs",
        "source": "tests/test_cost.py (made-up price)",
        "date": (date or dt.date.today() - dt.timedelta(days=10)).isoformat(),
        **extra,
    }
    if spot is not None:
        entry["spot"] = spot
    return entry


FIXTURE = [
    _entry("alpha", "A100-80GB", 1.5, spot=0.6),
    _entry("alpha", "H100-80GB", 4.0, spot=1.5),
    _entry("beta", "H100-80GB", 3.0, per_instance=1),
    _entry("beta", "A100-80GB", 2.2, per_instance=1),
]


def _catalog(tmp_path, entries, name="prices.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"prices": entries}), encoding="utf-8")
    return path


def _plan(*flags):
    return cli_in_process(*BASE, *flags)


def _speeds(entries) -> dict:
    """(gpu, GPUs per node, nodes) -> (tokens/s, step s) of the strategy search's fastest plan at that count."""
    from planner.hardware.cluster import make_cluster
    from planner.models.catalog import find_model
    from planner.search import Objective, PlanRequest, search_plans
    from planner.selector.training import default_seq_len

    spec = find_model(MODEL)
    assert spec is not None
    request = PlanRequest(seq_len=default_seq_len(spec), objective=Objective.THROUGHPUT)
    speeds = {}
    for entry in entries:
        for per_node, nodes in gpu_counts(entry["gpus_per_instance"], MAX_GPUS):
            key = (entry["gpu"], per_node, nodes)
            if key not in speeds:
                best = search_plans(spec, make_cluster(entry["gpu"], per_node, nodes), request, suggest=False).best
                speeds[key] = (best.throughput.tokens_per_s, best.throughput.step_time_s) if best else None
    return speeds


def _brute_force(entries, speeds, tokens, deadline_s):
    options = []
    for entry in entries:
        for per_node, nodes in gpu_counts(entry["gpus_per_instance"], MAX_GPUS):
            speed = speeds[(entry["gpu"], per_node, nodes)]
            if speed is None:
                continue
            hours = tokens / speed[0] / 3600
            gpus = per_node * nodes
            options.append((hours * gpus * entry["on_demand"], hours * 3600, entry["cloud"], entry["gpu"], gpus))
    return sorted(options), sorted(option for option in options if option[1] <= deadline_s)


def test_cheapest_equals_a_brute_force_recomputation(tmp_path):
    catalog = _catalog(tmp_path, FIXTURE)
    tokens = 2e10
    speeds = _speeds(FIXTURE)
    every, _ = _brute_force(FIXTURE, speeds, tokens, math.inf)
    # A deadline the unconstrained cheapest misses, so the deadline decides: halfway between its time and the
    # next faster option's (no option sits on it, so rounding it to the flag's text cannot move one across).
    faster = sorted({option[1] for option in every if option[1] < every[0][1]})
    assert faster, "every option is as slow as the cheapest: no deadline can decide"
    deadline_s = (faster[-1] + every[0][1]) / 2
    assert every[0][1] > deadline_s
    _, meeting = _brute_force(FIXTURE, speeds, tokens, deadline_s)
    run = _plan(
        "--clouds", "alpha,beta", "--tokens", tokens, "--deadline", f"{deadline_s:.6f}s", "--max-gpus", MAX_GPUS,
        "--price-catalog", catalog, "--json",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    best = result["best"]
    assert (best["cloud"], best["gpu"], best["gpus"]) == meeting[0][2:]
    assert best["cost_usd"] == pytest.approx(meeting[0][0], rel=1e-9)
    for cloud in ("alpha", "beta"):  # each cloud's two cheapest within the deadline
        expected = [option[2:] for option in meeting if option[2] == cloud][:2]
        assert [(o["cloud"], o["gpu"], o["gpus"]) for o in result["per_cloud"].get(cloud, [])] == expected


def test_the_table_says_where_each_number_came_from(tmp_path):
    run = _plan("--clouds", "alpha,beta", "--tokens", 2e10, "--deadline", "30d", "--price-catalog",
                _catalog(tmp_path, FIXTURE), "--max-gpus", 8)  # fmt: skip
    assert run.returncode == 0, run.stderr
    text = " ".join(run.stdout.split())
    assert "tests/test_cost.py (made-up price)" in text  # the price's source, with its date
    assert FIXTURE[0]["date"] in text  # the fixture's own date (built at import: a run across midnight moved "today")
    assert "the planner's estimate of its fastest plan" in text and "STALE" not in text


def test_a_multi_node_winner_says_which_network_it_was_planned_on(tmp_path):
    """Audit: every offer's nodes were planned on the GPU's typical fabric (InfiniBand NDR for the H100) without a
    word, whatever the cloud rents; the winner and the JSON name the fabric and why it was assumed."""
    from planner.hardware.cluster import make_cluster

    fast = [_entry("alpha", "H100-80GB", 1.0)]  # one offer: a deadline only many GPUs meet makes it multi-node
    args = ("--clouds", "alpha", "--tokens", 2e11, "--deadline", "1d", "--price-catalog", _catalog(tmp_path, fast),
            "--max-gpus", 64)  # fmt: skip
    run = _plan(*args)
    assert run.returncode == 0, run.stderr
    target = make_cluster("H100-80GB", 8, 2)
    fabric = (f"8 GPUs per node ({target.intra_node_bandwidth_GBps:g} GB/s inside a node), {target.inter_node_preset} "
              f"between nodes ({target.inter_node_bandwidth_GBps:g} GB/s) [the GPU's typical; the price catalog does "
              "not record each cloud's network]")  # fmt: skip
    text = " ".join(run.stdout.split())
    assert " node(s) of 8) on alpha" in text and f"planned on {fabric}" in text
    document = json.loads(_plan(*args, "--json").stdout)
    assert document["best"]["nodes"] > 1 and document["assumed_fabric"] == {"H100-80GB": fabric}


def test_price_overrides_every_entry(tmp_path):
    run = _plan("--clouds", "alpha,beta", "--tokens", 2e10, "--deadline", "30d", "--price", 0.5, "--price-catalog",
                _catalog(tmp_path, FIXTURE), "--max-gpus", 8, "--json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    considered = json.loads(run.stdout)["considered"]
    assert considered and all(o["price_usd_per_gpu_hour"] == 0.5 for o in considered)
    assert all(o["price_source"] == "--price (user)" for o in considered)
    best = json.loads(run.stdout)["best"]
    assert best["cost_usd"] == pytest.approx(2e10 / best["tokens_per_s"] / 3600 * best["gpus"] * 0.5)


def test_a_price_older_than_180_days_is_said_to_be_stale(tmp_path):
    old = dt.date.today() - dt.timedelta(days=STALE_AFTER_DAYS + 1)
    entries = [_entry("alpha", "H100-80GB", 4.0, date=old), _entry("beta", "H100-80GB", 9.0)]
    run = _plan("--clouds", "alpha,beta", "--tokens", 2e10, "--deadline", "30d", "--price-catalog",
                _catalog(tmp_path, entries), "--max-gpus", 8)  # fmt: skip
    assert run.returncode == 0, run.stderr
    text = " ".join(run.stdout.split())
    assert f"STALE: {STALE_AFTER_DAYS + 1} days old" in text and " 4.00! " in text and "! a stale price" in text
    assert "stale prices (over 180 days old; check the source before trusting them): alpha H100-80GB" in text
    catalog = load_price_catalog(_catalog(tmp_path, entries))
    assert [entry.stale(dt.date.today()) for entry in catalog.prices] == [True, False]


def test_spot_adds_what_preemption_costs_with_the_checkpoint_interval(tmp_path):
    run = _plan("--clouds", "alpha", "--tokens", 2e10, "--deadline", "30d", "--spot", "--save-every", 500,
                "--preemption-rate", 0.2, "--restart-minutes", 15, "--price-catalog", _catalog(tmp_path, FIXTURE),
                "--max-gpus", 8, "--json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    for option in json.loads(run.stdout)["considered"]:
        # reference: T' = T / (1 - rate x instances x (interval / 2 + restart)), interval = 500 steps
        work_h = 2e10 / option["tokens_per_s"] / 3600
        lost_h = (500 * option["step_time_s"] / 2 + 15 * 60) / 3600
        wall_h = work_h / (1 - 0.2 * math.ceil(option["gpus"] / 8) * lost_h)
        spot = {"A100-80GB": 0.6, "H100-80GB": 1.5}[option["gpu"]]
        assert option["time_s"] == pytest.approx(wall_h * 3600, rel=1e-9)
        assert option["cost_usd"] == pytest.approx(wall_h * option["gpus"] * spot, rel=1e-9)
        assert option["preemption"]["extra_usd"] == pytest.approx((wall_h - work_h) * option["gpus"] * spot)
    text = _plan("--clouds", "alpha", "--tokens", 2e10, "--spot", "--price-catalog", _catalog(tmp_path, FIXTURE),
                 "--max-gpus", 8).stdout  # fmt: skip
    # the run's default checkpoint interval (planner/contract/run_config.py) and the assumption, each said
    assert "[assumption, --preemption-rate]" in " ".join(text.split())
    assert "checkpoint interval (--save-every 1000 steps x" in " ".join(text.split())


def test_a_spot_run_that_never_finishes_is_null_in_json(tmp_path):
    entries = [_entry("alpha", "H100-80GB", 4.0, spot=1.5)]
    flags = ("--clouds", "alpha", "--tokens", 2e9, "--price-catalog", _catalog(tmp_path, entries), "--max-gpus", 16)
    steps = {o["gpus"]: o["step_time_s"] for o in json.loads(_plan(*flags, "--json").stdout)["considered"]}
    lost_h = {gpus: (1000 * step / 2 + 600) / 3600 for gpus, step in steps.items()}  # half an interval + restart
    rate = 2 / (lost_h[8] + 2 * lost_h[16])  # one 8-GPU instance finishes (rate x lost < 1), two do not
    assert rate * lost_h[8] < 1 < rate * 2 * lost_h[16]
    run = _plan(*flags, "--spot", "--preemption-rate", rate, "--json")
    assert run.returncode == 0, run.stderr

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    considered = {o["gpus"]: o for o in json.loads(run.stdout, parse_constant=refuse)["considered"]}
    assert considered[16]["time_s"] is None and considered[16]["cost_usd"] is None
    assert not considered[16]["meets_deadline"] and considered[8]["time_s"] is not None


def test_the_cluster_timed_is_the_instance_rented_and_preempted(tmp_path):
    # The brief's case: GCP rents H100s as a3-highgpu-1g (1 GPU per instance, planner/catalog/prices.yaml). Each
    # option must be planned on nodes of the instance's GPUs, one node per instance, and preempted per instance:
    # reference wall = work / (1 - 0.05/h x instances x (1000 steps x step / 2 + 600 s)), cost = wall x GPUs x spot.
    # GCP's H100 has two entries, the 1-GPU shape and the 8-GPU server: an option is timed on one instance's GPUs.
    catalog = {(e.cloud, e.gpu, e.gpus_per_instance): e for e in load_price_catalog().prices}
    run = cli_in_process("plan", "-m", "llama-2-7b", "--objective", "cost", "--clouds", "gcp,coreweave", "--spot",
                         "--deadline", "5000d", "--tokens", 2e11, "--no-calibration", "--json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    seen = set()
    for option in result["considered"]:
        entry = catalog[(option["cloud"], option["gpu"], option["gpus_per_node"])]
        assert entry.instance in option["price_source"]
        assert option["preemption"]["instances"] == option["nodes"]
        if entry.gpus_per_instance < 8:
            assert option["nodes"] == 1  # a cluster of small instances crosses a network the catalog lacks
        work_h = 2e11 / option["tokens_per_s"] / 3600
        lost_h = (1000 * option["step_time_s"] / 2 + 600) / 3600
        slowdown = 1 - 0.05 * option["nodes"] * lost_h
        if slowdown <= 0:  # loses more than it trains: never finishes (null in JSON)
            assert option["time_s"] is None
        else:
            assert option["time_s"] == pytest.approx(work_h / slowdown * 3600, rel=1e-9)
            assert option["cost_usd"] == pytest.approx(work_h / slowdown * option["gpus"] * entry.spot, rel=1e-9)
        seen.add((option["cloud"], option["gpus_per_node"]))
    assert ("gcp", 1) in seen and ("gcp", 8) in seen and ("coreweave", 8) in seen
    assert "gcp us-central1 H100-80GB (a3-highgpu-1g, 1 GPU)" in result["one_instance"]


def test_preemption_model_by_hand():
    # 100 h of work on 2 instances, 0.01 preemptions per instance-hour, 1000 steps of 1.8 s between checkpoints,
    # 10 min restart: each loses 900 + 600 s; 0.02/h x 1500 s = 1/120 of each hour, so 100 / (1 - 1/120) h.
    cost = preemption_cost(360_000, gpus=16, gpus_per_instance=8, price_per_gpu_hour=2.0, step_time_s=1.8,
                           checkpoint_every_steps=1000, rate_per_instance_hour=0.01, restart_s=600)  # fmt: skip
    assert cost.wall_s == pytest.approx(360_000 * 120 / 119)
    assert cost.extra_usd == pytest.approx((100 * 120 / 119 - 100) * 16 * 2.0)
    never = preemption_cost(3600, gpus=8, gpus_per_instance=1, price_per_gpu_hour=1.0, step_time_s=1.0,
                            checkpoint_every_steps=0, rate_per_instance_hour=1.0, restart_s=0)  # fmt: skip
    assert not never.finishes  # 8 preemptions an hour, each losing half an hour


def test_the_project_catalog_cites_every_price():
    catalog = load_price_catalog()
    assert {"aws", "gcp", "azure"} <= set(catalog.clouds()) and len(catalog.clouds()) >= 5
    for entry in catalog.prices:
        assert entry.source.startswith("https://") and entry.derivation and entry.instance
        assert entry.date <= dt.date.today()


def _refused(tmp_path, *flags):
    run = _plan(*flags)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
    assert run.stdout == ""
    return run.stderr


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"on_demand": -2.0}, "prices[0] (alpha A100-80GB) field 'on_demand' must be a positive USD per GPU-hour"),
        ({"on_demand": None}, "prices[0] (alpha A100-80GB) field 'on_demand' is missing"),
        # YAML's .nan was refused as "less than or equal to 1000000"
        ({"on_demand": float("nan")}, "prices[0] (alpha A100-80GB) field 'on_demand' Input should be a finite number"),
        ({"gpu": "Z9000"}, "names GPU 'Z9000', which the GPU catalog does not have"),
    ],
)
def test_a_bad_catalog_is_one_line(tmp_path, change, fragment):
    entry = {key: value for key, value in {**FIXTURE[0], **change}.items() if value is not None}
    catalog = _catalog(tmp_path, [entry, *FIXTURE[1:]])
    assert fragment in _refused(tmp_path, "--clouds", "alpha", "--price-catalog", catalog)


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (("--clouds", "alpha,nimbus"), "--clouds: unknown cloud 'nimbus'; the price catalog has alpha, beta"),
        (("--clouds", "alpha", "--deadline", "a week"), "--deadline must be a duration such as 7d"),
        (("--clouds", "alpha", "--deadline", "0h"), "--deadline must be more than 0"),
        (("--clouds", "alpha", "--tokens", "lots"), "Invalid value for '--tokens'"),
        (("--clouds", "alpha", "--tokens", "-1"), "--tokens must be more than 0"),
        (("--clouds", "beta", "--spot"), "no spot price for beta; drop --spot, or add a cloud that has one (alpha)"),
        (("--deadline", "7d"), "--deadline, --price-catalog: only for the search across clouds; add --clouds"),
        (("--clouds", "alpha", "--objective", "throughput"), "--clouds ranks by cost; use --objective cost"),
        (("--clouds", "alpha", "--explain"), "--explain shapes the strategy table; --clouds prints its own"),
        (("--clouds", "alpha", "--nodes", "2"), "--clouds searches the GPU count; drop --nodes/--gpus-per-node"),
        (("--clouds", "alpha", "--emit", "out"), "--emit: --clouds compares clouds and emits nothing"),
    ],
)
def test_bad_input_is_one_line(tmp_path, flags, fragment):
    catalog = _catalog(tmp_path, FIXTURE)
    assert fragment in _refused(tmp_path, *flags, "--price-catalog", catalog)


def test_a_deadline_nothing_meets_says_what_would(tmp_path):
    message = _refused(tmp_path, "--clouds", "alpha,beta", "--tokens", 1e13, "--deadline", "1h", "--max-gpus", 8,
                       "--price-catalog", _catalog(tmp_path, FIXTURE))  # fmt: skip
    assert "no option trains 1e+13 tokens within 1 hours: the fastest, 8 x H100-80GB" in message
    assert "give --deadline" in message
    # 8 GPUs, the most searched, was the fastest of alpha's H100: more may help, and it says the search stopped there
    assert "raise --max-gpus above 8: alpha H100-80GB was fastest at 8 GPUs" in message


def test_a_missed_spot_deadline_advises_only_what_would_help(tmp_path):
    # At 0.5 preemptions per instance-hour 64 GPUs (8 instances) are slower than 32: the search tried more GPUs, so
    # "allow more GPUs" would not help. The remedies are computed from T / (1 - rate x instances x lost) <= deadline
    # (planner/cost/preemption.py), lost = 1000 steps x step / 2 + 600 s, for the option that needs the least.
    catalog = _catalog(tmp_path, [_entry("alpha", "H100-80GB", 4.0, spot=1.5)])
    flags = ("--clouds", "alpha", "--tokens", 2e10, "--spot", "--preemption-rate", 0.5, "--max-gpus", 64,
             "--price-catalog", catalog)  # fmt: skip
    options = json.loads(_plan(*flags, "--deadline", "3650d", "--json").stdout)["considered"]
    times = {o["gpus"]: o["time_s"] for o in options}
    assert times[64] > times[32]  # the premise: more instances were slower
    deadline_s = 7200.0
    assert min(times.values()) > deadline_s
    rates, saves = [], []
    for o in options:
        work_s, instances = 2e10 / o["tokens_per_s"], o["gpus"] // 8
        if work_s < deadline_s:
            rates.append((1 - work_s / deadline_s) * 3600 / (instances * (1000 * o["step_time_s"] / 2 + 600)))
            lost_s = (1 - work_s / deadline_s) * 3600 / (0.5 * instances)
            saves.append(math.floor(2 * (lost_s - 600) / o["step_time_s"]))
    message = " ".join(_refused(tmp_path, *flags, "--deadline", f"{deadline_s:g}s").split())
    assert "--max-gpus" not in message and "linear" not in message
    assert f"--preemption-rate {max(rates):.3g} or less per instance-hour" in message
    if max(saves) >= 1:
        assert f"checkpoint every {max(saves):,} steps or fewer (--save-every)" in message
    else:  # even a checkpoint every step loses more than the deadline allows: not advised
        assert "--save-every" not in message
    assert f"give --deadline {math.ceil(min(times.values()) / 3600 * 10) / 10:g}h or more" in message
    assert "drop --spot: without preemptions 64 x H100-80GB takes" in message


# --- plain --objective cost (no --clouds): the price catalog's cheapest on-demand price per GPU ---------------


def test_the_winners_calibration_is_its_own_plans_as_plan_says_it(tmp_path):
    """The calibration said under the winner was the first count's line for its GPU: with a measured record of
    the winner's own 8-GPU plan, it said "not calibrated ... none usable" (the 1-GPU search's line) while the
    winner's speed was the record's. The reference is `plan`'s own line for the winner's GPU and count."""
    from benchmarks_db.record import spec_hash
    from benchmarks_db.store import BenchmarkStore
    from planner.hardware.cluster import make_cluster
    from planner.models.catalog import find_model
    from planner.search import Objective, PlanRequest, search_plans
    from planner.selector.training import default_seq_len
    from tests.db_samples import sample_record

    spec = find_model(MODEL)
    assert spec is not None
    seq = default_seq_len(spec)
    best = search_plans(spec, make_cluster("H100-80GB", 8, 1), PlanRequest(seq_len=seq,
                        objective=Objective.THROUGHPUT), suggest=False).best  # fmt: skip
    assert best is not None and best.throughput is not None
    config, step = best.config, best.throughput.step_time_s / 4  # measured 4x faster: the 8-GPU run wins
    record = sample_record(gpu_name="H100-80GB", gpu_count=8, model_name=MODEL, model_spec_hash=spec_hash(spec),
                           tiny=False, strategy=config.strategy.value, config_json=config.model_dump_json(),
                           micro_batch=config.micro_batch, grad_accum=config.grad_accum,
                           global_batch=config.micro_batch * config.grad_accum * 8, seq_len=seq,
                           precision=config.precision.value, step_time_median_s=step, tokens_per_s=None,
                           predicted_step_time_s=None, peak_memory_per_rank_bytes=None)  # fmt: skip
    db = tmp_path / "runs.duckdb"
    BenchmarkStore(db).add(record)
    args = ("plan", "--model", MODEL, "--objective", "cost", "--clouds", "alpha", "--tokens", 2e10, "--deadline",
            "365d", "--max-gpus", 8, "--price-catalog", _catalog(tmp_path, [
            _entry("alpha", "H100-80GB", 1.0, per_instance=1), {**_entry("alpha", "H100-80GB", 1.0), "region": "r2"}]),
            "--db", db)  # fmt: skip
    document = json.loads(cli_in_process(*args, "--json").stdout)
    assert document["best"]["gpus"] == 8
    planned = cli_in_process("plan", "--model", MODEL, "--gpu", "H100-80GB", "--gpus-per-node", 8, "--seq-len",
                             seq, "--db", db, "--json")  # fmt: skip
    line = json.loads(planned.stdout)["best"]["calibration"]
    assert line.startswith("calibrated on 1 measured run for H100-80GB")
    assert document["best_calibration"] == line
    assert document["throughput_calibration"]["H100-80GB"].startswith("not calibrated")  # the GPU's first count
    assert f"(strategy search, {line})" in " ".join(cli_in_process(*args).stdout.split())
