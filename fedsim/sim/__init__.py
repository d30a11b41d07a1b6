"""The federated simulation: the round loop and its stages (rounds/), the lifecycle every engine shares (run/),
the executors that train clients on a device (executors/), the pool, devices and scheduler (runtime/), client
selection (selection/), the server's stages (server_stages/), client state (state/), and checkpoints and
outputs (persist/)."""
