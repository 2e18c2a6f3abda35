# attn_project_options(<target>): warnings (as errors unless ATTN_WERROR is
# OFF) for the project's own code. Third-party headers are included as
# system headers by their imported targets, so they do not trip -Werror.
function(attn_project_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(ATTN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# attn_torch_pch(<target>): the target's files start from the precompiled
# <torch/torch.h> of the attn_torch_pch target (top-level CMakeLists.txt).
# Parsing the header costs a translation unit 15-20 s; one shared
# precompiled copy is built once instead of once per target. Files that do
# not use LibTorch set SKIP_PRECOMPILE_HEADERS. -Winvalid-pch reports a
# target whose flags would make gcc ignore the shared header.
function(attn_torch_pch target)
  target_precompile_headers(${target} REUSE_FROM attn_torch_pch)
  target_compile_options(${target} PRIVATE -Winvalid-pch)
endfunction()

# attn_test_options(<target>): test and benchmark programs build without debug
# information in RelWithDebInfo: a test translation unit compiles in two
# thirds of the time (docs/build.md), and a failing test names its file and
# line through GoogleTest, not the debugger.
function(attn_test_options target)
  attn_project_options(${target})
  target_compile_options(${target} PRIVATE $<$<CONFIG:RelWithDebInfo>:-g0>)
endfunction()
