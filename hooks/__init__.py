"""The OCI runtime hook and the CDI spec: the shim for containers the device plugin did not start."""
