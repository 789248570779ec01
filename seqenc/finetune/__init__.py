"""Fine-tuning on a label table: the label module (an encoder, its head and their loss), how it is
built from a fit's options, its schedule and class weights, a fused head's wide start, and the
aggregates' baseline printed beside its score."""
