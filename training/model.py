"""The default model: transformers' Qwen3.5 text trunk + a Qwen3.5-style MTP head.

Trunk: Qwen3_5ForCausalLM (Gated DeltaNet / gated full-attention interleave, partial rope,
tied embeddings). MTP head, named as in the real Qwen3.5 checkpoints (mtp.*):
    e = pre_fc_norm_embedding(embed(x_{t+1})), h = pre_fc_norm_hidden(h_t)  (h_t: trunk output
    after its final norm), fc([e; h]) -> one full-attention decoder layer (the transformers
    layer class) -> norm -> the shared tied head, predicting x_{t+2}.
"""
import copy

import torch
from torch import nn
import torch.nn.functional as F
from transformers import Qwen3_5TextConfig, Qwen3_5ForCausalLM
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5RMSNorm


def make_config(vocab, d, n_layer, ffn, n_head, n_kv, head_dim, gdn_k, gdn_v, gdn_hd,
                attn_every=4, ctx=512, eot_id=0):
    # pad_token_id None: a padding_idx would freeze the <|endoftext|> embedding row, and that
    # token separates every training document.
    return Qwen3_5TextConfig(
        vocab_size=vocab, hidden_size=d, intermediate_size=ffn, num_hidden_layers=n_layer,
        num_attention_heads=n_head, num_key_value_heads=n_kv, head_dim=head_dim,
        linear_conv_kernel_dim=4, linear_key_head_dim=gdn_hd, linear_value_head_dim=gdn_hd,
        linear_num_key_heads=gdn_k, linear_num_value_heads=gdn_v,
        layer_types=["full_attention" if (i + 1) % attn_every == 0 else "linear_attention"
                     for i in range(n_layer)],
        max_position_embeddings=ctx, rms_norm_eps=1e-6, initializer_range=0.02,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        tie_word_embeddings=True, eos_token_id=eot_id, pad_token_id=None, bos_token_id=None,
        architectures=["Qwen3_5ForCausalLM"], attn_implementation="sdpa")


class MTPHead(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.hidden_size
        lcfg = copy.deepcopy(cfg)
        lcfg.num_hidden_layers = 1
        lcfg.layer_types = ["full_attention"]
        self.pre_fc_norm_embedding = Qwen3_5RMSNorm(d, eps=cfg.rms_norm_eps)
        self.pre_fc_norm_hidden = Qwen3_5RMSNorm(d, eps=cfg.rms_norm_eps)
        self.fc = nn.Linear(2 * d, d, bias=False)
        self.layers = nn.ModuleList([Qwen3_5DecoderLayer(lcfg, 0)])
        self.norm = Qwen3_5RMSNorm(d, eps=cfg.rms_norm_eps)

    def forward(self, emb_next, h, position_embeddings):
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(emb_next), self.pre_fc_norm_hidden(h)], -1))
        # attention_mask None: sdpa runs causal (Qwen3_5Attention.is_causal), as the trunk does
        x = self.layers[0](x, position_embeddings=position_embeddings, attention_mask=None)
        return self.norm(x)


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.lm = Qwen3_5ForCausalLM(cfg)
        self.mtp = MTPHead(cfg)
        for m in self.mtp.modules():
            self.lm._init_weights(m)
        # GPT-2-style scaled init of the residual-output projections (depth-stable start)
        std = cfg.initializer_range / (2 * (cfg.num_hidden_layers + 1)) ** 0.5
        for n, p in self.named_parameters():
            if n.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight")):
                nn.init.normal_(p, 0.0, std)
        assert self.lm.lm_head.weight is self.lm.model.embed_tokens.weight

    def forward(self, ids, mtp=True):
        """ids [B, T] -> (trunk logits [B,T,V], mtp logits [B,T-1,V] or None); mtp logits at
        position t predict ids[t+2] from h_t and ids[t+1]."""
        tm = self.lm.model
        h = tm(input_ids=ids, use_cache=False).last_hidden_state
        logits = self.lm.lm_head(h)
        if not mtp:
            return logits, None
        T = ids.shape[1]
        emb = tm.embed_tokens(ids[:, 1:])
        pos = torch.arange(T - 1, device=ids.device).view(1, 1, -1).expand(3, ids.shape[0], -1)
        pe = tm.rotary_emb(emb, pos)
        hm = self.mtp(emb, h[:, :-1], pe)
        return logits, self.lm.lm_head(hm)

    def losses(self, ids):
        logits, ml = self(ids)
        V = logits.shape[-1]
        ce = F.cross_entropy(logits[:, :-1].reshape(-1, V).float(), ids[:, 1:].reshape(-1))
        mce = F.cross_entropy(ml[:, :-1].reshape(-1, V).float(), ids[:, 2:].reshape(-1))
        return ce, mce
