"""The hardware a plan runs on: the GPU catalog (gpus.py), a cluster of them (cluster.py), what this machine
has (detect.py, through NVML) and the launcher's environment a process runs in (launch_context.py)."""
