"""`cgpu webhook`: a mutating admission webhook that turns gpushare/Volcano pod specs into DRA
claims on the `gpu.cgpu.io` DeviceClass (docs/operations-webhook.md)."""
