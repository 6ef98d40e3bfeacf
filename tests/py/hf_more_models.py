# hf_more_models.py — owns the wider transformers model list (beyond the zoo): small configs of further model families, random weights, for graph-count and equality checks against torch._dynamo.
"""``MORE[name]()`` returns ``(model, inputs)``: eval-mode checks only (the zoo covers training)."""
import torch

V = 128
SMALL = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=64)


def _ids(seed=0):
    return torch.randint(0, V, (2, 8), generator=torch.Generator().manual_seed(seed))


def _pixels(seed=0):
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def _text(model_cls, config_cls, **cfg):
    def build():
        return model_cls(config_cls(**cfg)), {"input_ids": _ids()}
    return build


def _build():
    import transformers as T
    vit_like = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
                    patch_size=8)
    return {
        "roberta": _text(T.RobertaModel, T.RobertaConfig, **SMALL),
        "albert": _text(T.AlbertModel, T.AlbertConfig, **SMALL, embedding_size=16),
        "electra": _text(T.ElectraModel, T.ElectraConfig, **SMALL, embedding_size=32),
        "mistral": _text(T.MistralForCausalLM, T.MistralConfig, **SMALL, num_key_value_heads=1),
        "qwen2": _text(T.Qwen2ForCausalLM, T.Qwen2Config, **SMALL, num_key_value_heads=1),
        "gemma": _text(T.GemmaForCausalLM, T.GemmaConfig, **SMALL, num_key_value_heads=1, head_dim=16),
        "phi": _text(T.PhiForCausalLM, T.PhiConfig, **SMALL),
        "opt": _text(T.OPTForCausalLM, T.OPTConfig, vocab_size=V, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=2, ffn_dim=64, max_position_embeddings=64, word_embed_proj_dim=32),
        "gpt_neo": _text(T.GPTNeoForCausalLM, T.GPTNeoConfig, vocab_size=V, hidden_size=32, num_layers=2, num_heads=2,
                         attention_types=[[["global", "local"], 1]], max_position_embeddings=64, bos_token_id=0,
                         eos_token_id=0),
        "clip_text": _text(T.CLIPTextModel, T.CLIPTextConfig, vocab_size=V, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=64, max_position_embeddings=64, bos_token_id=0,
                           eos_token_id=1),
        "mobilebert": _text(T.MobileBertModel, T.MobileBertConfig, vocab_size=V, hidden_size=32,
                            num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, embedding_size=16,
                            intra_bottleneck_size=16, true_hidden_size=16, max_position_embeddings=64),
        "gemma2": _text(T.Gemma2ForCausalLM, T.Gemma2Config, **SMALL, num_key_value_heads=1, head_dim=16),
        "mixtral": _text(T.MixtralForCausalLM, T.MixtralConfig, **SMALL, num_key_value_heads=1, num_local_experts=4,
                         num_experts_per_tok=2),
        "funnel": _text(T.FunnelModel, T.FunnelConfig, vocab_size=V, d_model=32, n_head=2, d_head=16, d_inner=64,
                        block_sizes=[1, 1]),
        "convbert": _text(T.ConvBertModel, T.ConvBertConfig, **SMALL),
        "squeezebert": _text(T.SqueezeBertModel, T.SqueezeBertConfig, **SMALL, embedding_size=32),
        "mt5": lambda: (T.MT5Model(T.MT5Config(vocab_size=V, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2)),
                        {"input_ids": _ids(), "decoder_input_ids": _ids(1)}),
        "bart": lambda: (T.BartForConditionalGeneration(T.BartConfig(
            vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)),
            {"input_ids": _ids(), "decoder_input_ids": _ids(1)}),
        "m2m100": lambda: (T.M2M100ForConditionalGeneration(T.M2M100Config(
            vocab_size=V, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64)),
            {"input_ids": _ids(), "decoder_input_ids": _ids(1)}),
        "deit": lambda: (T.DeiTModel(T.DeiTConfig(**vit_like)), {"pixel_values": _pixels()}),
        "swin": lambda: (T.SwinModel(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                                  num_heads=[1, 2], window_size=4)), {"pixel_values": _pixels()}),
        "wav2vec2": lambda: (T.Wav2Vec2Model(T.Wav2Vec2Config(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, conv_dim=(16, 16),
            conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2)),
            {"input_values": torch.randn(2, 800, generator=torch.Generator().manual_seed(0))}),
    }


MORE = _build()
