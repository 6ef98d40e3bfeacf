# hf_zoo_models.py — owns the transformers model zoo used by tests and benchmarks: small configs (random weights, no downloads) and example inputs per model.
"""``MODELS[name]()`` returns ``(model, make_inputs)``; ``make_inputs(seed)`` gives the forward's keyword
arguments. Configs are small (2 layers, hidden 32-64) so a compile takes seconds on a CPU."""
import torch

VOCAB = 128


def _ids(seed, batch=2, seq=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, seq), generator=g)


def bert():
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    return BertModel(cfg), lambda s: {"input_ids": _ids(s)}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    return GPT2LMHeadModel(cfg), lambda s: {"input_ids": _ids(s)}


def t5():
    from transformers import T5Config, T5ForConditionalGeneration
    cfg = T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2,
                   num_heads=2, decoder_start_token_id=0)
    return T5ForConditionalGeneration(cfg), lambda s: {"input_ids": _ids(s), "decoder_input_ids": _ids(s + 1)}


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg), lambda s: {"input_ids": _ids(s)}


def distilbert():
    from transformers import DistilBertConfig, DistilBertModel
    cfg = DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                           max_position_embeddings=64)
    return DistilBertModel(cfg), lambda s: {"input_ids": _ids(s)}


def vit():
    from transformers import ViTConfig, ViTModel
    cfg = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    image_size=32, patch_size=8)

    def inputs(s):
        g = torch.Generator().manual_seed(s)
        return {"pixel_values": torch.randn(2, 3, 32, 32, generator=g)}
    return ViTModel(cfg), inputs


MODELS = {"bert": bert, "gpt2": gpt2, "t5": t5, "llama": llama, "distilbert": distilbert, "vit": vit}
