"""The compute arbiter: a host daemon that time-slices each GPU among the containers that have a
compute limit, one container holding a GPU's token at a time."""
