# attn_project_options(<target>): warnings (as errors unless ATTN_WERROR is
# OFF) for the project's own code. Third-party headers are included as
# system headers by their imported targets, so they do not trip -Werror.
function(attn_project_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(ATTN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# attn_torch_pch(<target>): precompiles the LibTorch headers for a target.
# One translation unit that parses <torch/torch.h> costs ~15-20 s here.
function(attn_torch_pch target)
  target_precompile_headers(${target} PRIVATE <torch/torch.h>)
endfunction()
