"""`cgpu exporter`: Prometheus metrics for every container slice and every GPU of a node.

Modules: `scan` reads the container directories and ledgers, `nvml` asks NVML, `podresources`
asks the kubelet, `labels` names containers, `collector` builds the metric families, `server`
serves them, and `cli` wires it together.
"""
