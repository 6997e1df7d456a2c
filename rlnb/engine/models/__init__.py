"""The models: the trainable policy, the embedded tiny model and the generation backends."""
