"""The OCI runtime hook and CDI spec: the shim for containers the device plugin did not start."""
