"""What one plan's cost is priced at: the catalog's cheapest rate for its GPU, named with its source and date (a
multi-node plan at whole servers the catalog rents), --price where the catalog has none, and a price's age
counted to SOURCE_DATE_EPOCH. Cost across clouds is tests/test_cost.py's."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from distributed import cli_in_process

from planner.cost.checked_prices import load_price_catalog
from tests.test_cost import _plan, _refused


def test_plain_cost_prices_the_gpu_from_the_catalog_and_names_the_source():
    from planner.cost.prices import cheapest_on_demand

    cheapest = cheapest_on_demand(load_price_catalog(), "H100-80GB")
    assert cheapest is not None
    run = _plan("--gpu", "H100-80GB", "--gpus-per-node", "2", "--json")
    assert run.returncode == 0, run.stderr
    best = json.loads(run.stdout)["best"]
    gpu = best["cluster"]["gpu"]
    assert gpu["price_usd_per_hour"] == cheapest.on_demand and gpu["price_date"] == cheapest.date.isoformat()
    assert cheapest.source in gpu["price_source"] and f"{cheapest.cloud} {cheapest.region}" in gpu["price_source"]
    (figure,) = [reason for reason in best["reasons"] if "to train" in reason]
    assert f"at ${cheapest.on_demand:.2f}/GPU-hour [price: {gpu['price_source']}]" in figure
    table = "".join(_plan("--gpu", "H100-80GB", "--gpus-per-node", "2").stdout.split())  # rich wraps even URLs
    line = f"at ${cheapest.on_demand:.2f}/GPU-hour [{gpu['price_source']}] (--price)"
    assert "".join(line.split()) in table


def test_plain_cost_of_a_gpu_the_catalog_does_not_price_asks_for_price():
    message = _refused(None, "--gpu", "T4", "--gpus-per-node", "2")
    assert message.startswith("error: --objective cost: no price for T4: planner/catalog/prices.yaml cites no price")
    assert "pass --price USD_PER_GPU_HOUR" in message
    run = _plan("--gpu", "T4", "--gpus-per-node", "2", "--price", "0.5", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["best"]["cluster"]["gpu"]["price_source"] == "user override"


def test_a_prices_age_is_counted_to_source_date_epoch_when_set(monkeypatch):
    """Outputs that name prices reproduce on a later day under SOURCE_DATE_EPOCH (the golden copies set it): the
    age, and STALE past 180 days, are counted to its day, not the clock's."""
    from planner.cost.prices import catalog_today
    from planner.hardware.gpus import resolve_gpu

    gpu = resolve_gpu("A100-80GB")
    assert gpu.price_date is not None
    day = dt.datetime.combine(gpu.price_date + dt.timedelta(days=200), dt.time(), tzinfo=dt.timezone.utc)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(int(day.timestamp())))
    assert catalog_today() == gpu.price_date + dt.timedelta(days=200)
    assert gpu.price_note().endswith("; STALE: 200 days old (over 180)]")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(int((day - dt.timedelta(days=100)).timestamp())))
    assert "STALE" not in gpu.price_note()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "tomorrow")
    with pytest.raises(ValueError, match="SOURCE_DATE_EPOCH='tomorrow' is not whole seconds since 1970; unset it"):
        catalog_today()


def test_a_multi_node_plan_is_priced_as_whole_servers_the_catalog_rents(tmp_path):
    # Two nodes joined by InfiniBand are rented as 8-GPU servers, not as single-GPU pods: the reference is the
    # catalog's cheapest on-demand entry of H100-80GB among instances of 8 or more GPUs, x GPU-hours.
    servers = [e for e in load_price_catalog().prices if e.gpu == "H100-80GB" and e.gpus_per_instance >= 8]
    entry = min(servers, key=lambda e: (e.on_demand, -e.date.toordinal()))
    run = cli_in_process("plan", "-m", "llama-2-7b", "--gpu", "H100-80GB", "--nodes", 2, "--no-calibration", "--json")
    assert run.returncode == 0, run.stderr
    to_train = json.loads(run.stdout)["best"]["to_train"]
    assert to_train["price_usd_per_gpu_hour"] == entry.on_demand
    assert to_train["cost_usd"] == pytest.approx(to_train["time_s"] / 3600 * 16 * entry.on_demand, rel=1e-9)
    assert (
        f"{entry.cloud} {entry.region}, {entry.instance}, {entry.source}, {entry.date.isoformat()}"
        in (to_train["price_source"])
    )
    # a GPU the catalog prices only as a single-GPU machine keeps that rate, and says what it is
    single = cli_in_process("plan", "-m", "gpt2-medium", "--gpu", "H100-PCIe", "--nodes", 2, "--no-calibration")
    assert "multi-node InfiniBand clusters cost more: pass --price" in " ".join(single.stdout.split())
