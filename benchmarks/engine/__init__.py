"""Engine: our torch.distributed engine against itself and its peers, multi-rank on CPU (gloo).

engine_3d.py trains one model under dp, tp, pp and mixed layouts; engine_vs_peers.py our ZeRO-1/2/3
against DeepSpeed's and FSDP2 through the one runner. See docs/performance.md.
"""
