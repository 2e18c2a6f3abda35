# Uses ccache when present. Precompiled headers need the pch_defines and
# time_macros sloppiness for ccache to hit, and gcc needs -fpch-preprocess.
# BASEDIR and NOHASHDIR let a fresh clone in another directory (as CI makes)
# reuse the cache: paths under the source tree are hashed relative, and the
# working directory, which only ends up in debug info, is not hashed.
find_program(ATTN_CCACHE ccache)
if(ATTN_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" "CCACHE_NOHASHDIR=1"
      ${ATTN_CCACHE})
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-fpch-preprocess)
  endif()
  message(STATUS "ccache: ${ATTN_CCACHE}")
endif()
