"""Edge-cloud split fine-tuning: a pretrained transformer cut in two, its frozen bottom on the edge, LoRA-FA
adapters on the top trained in the cloud from compressed activations; ``fedsim split`` simulates it in one process."""
