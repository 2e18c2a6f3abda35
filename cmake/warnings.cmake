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

# attn_test_program(<target>): a GoogleTest program: attn_test_options, and
# -O1 in RelWithDebInfo. The tests' own code is assertions and set-up; what
# they time and loop over is the libraries' code and the reference loops
# (attn_test_support), which keep -O2. A test batch compiles in a fifth
# less time at -O1 (docs/build.md).
function(attn_test_program target)
  attn_test_options(${target})
  target_compile_options(${target} PRIVATE $<$<CONFIG:RelWithDebInfo>:-O1>)
endfunction()

# attn_unity(<target> <batch>): compiles the target's files in unity batches
# of <batch> files. Starting a file from the precompiled LibTorch header, or
# parsing and instantiating nlohmann/json, Abseil and gRPC's headers again,
# costs more than compiling most of these files, so fewer, larger
# translation units build faster (docs/build.md). In a target with the
# precompiled header, files that skip it stay out of the batches.
# -DATTN_UNITY_BUILD=OFF builds one file at a time (clearer errors while
# editing).
#
# The fuzz build (tests/fuzz/CMakeLists.txt) links its own instrumented
# copies of the torch-free sources beside these targets' libraries. There
# each of those files must stay an archive member of its own, so that the
# linker takes only what the copies lack, not a batch that defines them
# again: under ATTN_FUZZ only targets with the precompiled header batch.
function(attn_unity target batch)
  get_target_property(pch ${target} PRECOMPILE_HEADERS_REUSE_FROM)
  if(ATTN_UNITY_BUILD AND (pch OR NOT ATTN_FUZZ))
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${batch})
    get_target_property(sources ${target} SOURCES)
    foreach(source ${sources})
      get_source_file_property(skip ${source} SKIP_PRECOMPILE_HEADERS)
      if(skip)
        set_source_files_properties(${source} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
      endif()
    endforeach()
  endif()
endfunction()
