"""Serving plans: memory per GPU, layouts (TP, PP, replicas) and a roofline for TTFT, ITL and tokens/s.

    from planner.inference import InferenceRequest, plan_serving
    result = plan_serving(resolve_model("llama-2-70b"), make_cluster("H100-80GB"), InferenceRequest(batch=32))

docs/inference.md states the formulas and their sources; docs/accuracy.md compares them with measurements.
"""

from planner.inference.memory import ServingMemory, serving_memory
from planner.inference.request import InferenceRequest, KvFormat, ServingObjective, WeightFormat
from planner.inference.search import ServingPlan, ServingResult, plan_serving
from planner.inference.speed import ServingSpeed, serving_speed

__all__ = [
    "InferenceRequest",
    "KvFormat",
    "ServingMemory",
    "ServingObjective",
    "ServingPlan",
    "ServingResult",
    "ServingSpeed",
    "WeightFormat",
    "plan_serving",
    "serving_memory",
    "serving_speed",
]
