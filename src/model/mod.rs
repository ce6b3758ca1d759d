//! fairseq's TransformerModel, module by module.
