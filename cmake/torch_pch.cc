// The translation unit of the attn_torch_pch target, which only builds the
// shared precompiled <torch/torch.h>.
