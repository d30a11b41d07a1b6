"""What edge and cloud share, and nothing else: ``split.proto`` and its stubs, batches, session constants.

The edge (``edge/``) and the cloud service (``server/``) each import this package, never each other, as
Flower keeps ``flwr/proto`` apart from its client and server. Nothing here imports torch, the cloud trainer or
the run store, so an edge device installs it with numpy, grpcio and protobuf alone.
"""
