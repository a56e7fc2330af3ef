"""The device plugin's configuration: the command's options as one frozen object."""
