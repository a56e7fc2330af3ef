"""`cgpu scheduler-extender`: a kube-scheduler extender for aliyun.com/gpu-mem.

A drop-in for gpushare-scheduler-extender: filter, prioritize and bind over HTTP, with the
cluster's state rebuilt from the API server (list+watch) and an in-memory assume cache.
"""
