from planner.cluster import make_cluster
from planner.model_resolve import resolve_model
from planner.throughput.estimate import estimate_throughput
from planner.training_config import TrainingConfig


def test_more_gpus_process_more_tokens_per_second():
    spec = resolve_model("llama-2-7b")
    config = TrainingConfig(strategy="fsdp", micro_batch=4, seq_len=2048)
    one_node = estimate_throughput(spec, config, make_cluster("A100-80GB", 8, 1))
    two_nodes = estimate_throughput(spec, config, make_cluster("A100-80GB", 8, 2))
    assert two_nodes.tokens_per_s > one_node.tokens_per_s
    assert 0 < one_node.mfu < 1
