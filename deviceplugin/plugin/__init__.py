"""The kubelet-facing side: the gRPC server, registration, ListAndWatch, the Allocate response."""
