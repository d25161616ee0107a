"""The paper's encoder-decoder against torch.nn.Transformer with mapped weights (post-LN, padded source and
target), and the encode/decode split."""

import torch
from torch import nn

import tformer
from tformer.nn.masks import attention_mask, causal_mask

D, H, FF = 32, 4, 64


def copy_attention(ours: nn.Module, ref: nn.MultiheadAttention) -> None:
    for proj, w, b in zip((ours.q_proj, ours.k_proj, ours.v_proj), ref.in_proj_weight.chunk(3),
                          ref.in_proj_bias.chunk(3), strict=True):
        proj.weight.data.copy_(w)
        proj.bias.data.copy_(b)
    ours.out_proj.load_state_dict(ref.out_proj.state_dict())


def copy_layer(ours: nn.Module, ref: nn.Module, *, cross: bool) -> None:
    copy_attention(ours.mixer, ref.self_attn)
    ours.mlp.fc_in.load_state_dict(ref.linear1.state_dict())
    ours.mlp.fc_out.load_state_dict(ref.linear2.state_dict())
    ours.mixer_norm.load_state_dict(ref.norm1.state_dict())
    if cross:
        copy_attention(ours.cross_attn, ref.multihead_attn)
        ours.cross_norm.load_state_dict(ref.norm2.state_dict())
        ours.mlp_norm.load_state_dict(ref.norm3.state_dict())
    else:
        ours.mlp_norm.load_state_dict(ref.norm2.state_dict())


def test_stacks_match_torch_transformer() -> None:
    config = tformer.Seq2SeqConfig(vocab_size=50, d_model=D, n_heads=H, d_ff=FF, n_layers=2,
                                   n_decoder_layers=3, norm=tformer.config.NormConfig(final=True))
    ours = tformer.EncoderDecoder(config).eval()
    ref = nn.Transformer(d_model=D, nhead=H, num_encoder_layers=2, num_decoder_layers=3, dim_feedforward=FF,
                         dropout=0.0, batch_first=True)
    for mine, theirs in zip(ours.encoder.layers, ref.encoder.layers, strict=True):
        copy_layer(mine, theirs, cross=False)
    for mine, theirs in zip(ours.decoder.layers, ref.decoder.layers, strict=True):
        copy_layer(mine, theirs, cross=True)
    ours.encoder.final_norm.load_state_dict(ref.encoder.norm.state_dict())
    ours.decoder.final_norm.load_state_dict(ref.decoder.norm.state_dict())

    src, tgt = torch.randn(3, 9, D), torch.randn(3, 6, D)
    src_valid = torch.ones(3, 9, dtype=torch.bool)
    src_valid[1, 6:] = src_valid[2, 2:] = False
    tgt_valid = torch.ones(3, 6, dtype=torch.bool)
    tgt_valid[0, 4:] = tgt_valid[2, 1:] = False
    expected = ref(src, tgt, tgt_mask=~causal_mask(6, 6), src_key_padding_mask=~src_valid,
                   tgt_key_padding_mask=~tgt_valid, memory_key_padding_mask=~src_valid)
    memory = ours.encoder(src, mask=attention_mask(9, src_valid))
    got = ours.decoder(tgt, memory, mask=tgt_valid[:, None, None, :], memory_mask=src_valid[:, None, None, :])
    diff = (got - expected).abs().max().item()
    print(f"max |ours - torch.nn.Transformer| = {diff:.2e}")
    assert diff <= 1e-5


def test_forward_is_encode_then_decode_and_ignores_source_padding() -> None:
    model = tformer.build_model(tformer.preset("transformer-tiny")).eval()
    src = torch.randint(3, 1000, (2, 7))
    tgt = torch.randint(3, 1000, (2, 5))
    src[1, 4:] = 0
    logits = model(src, tgt)
    assert logits.shape == (2, 5, 1000)
    valid = src != 0
    again = model.decode(tgt, model.encode(src, valid), valid)
    assert torch.equal(logits, again)
    alone = model(src[1:, :4], tgt[1:])  # the same sentence without its padding
    assert (alone - logits[1:]).abs().max() <= 1e-5


def test_decoder_is_causal() -> None:
    model = tformer.build_model(tformer.preset("transformer-tiny")).eval()
    src, tgt = torch.randint(3, 1000, (1, 6)), torch.randint(3, 1000, (1, 8))
    changed = tgt.clone()
    changed[0, 5:] = 7
    a, b = model(src, tgt), model(src, changed)
    assert torch.equal(a[:, :5], b[:, :5]) and not torch.equal(a[:, 5:], b[:, 5:])


def test_embeddings_are_scaled_and_tied() -> None:
    model = tformer.build_model(tformer.preset("transformer-tiny"))
    assert model.src_embed.scale == 64**0.5
    assert model.lm_head.weight is model.tgt_embed.tokens.weight is model.src_embed.tokens.weight
