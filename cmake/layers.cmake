# The layers of the house (docs/architecture.md, spec house-style.md), enforced by the linker.
#
# Each layer is the .c files of its directories under src/ (globbed: a new file lands in its
# directory's layer with no edit here). It is compiled once, as an OBJECT library
# mc_layer_<name>_obj, and archived twice: into mc_layer_<name> (a static library whose
# target_link_libraries name only the layers it may call) and into libmegatron.a, the public
# library, the union of all layers, which the tools and the tests link.
#
# Why an upward arrow fails: the build links one check program per layer,
# build/layers/layer_check_<name>, from *every* object of that layer (objects given to the
# linker by name, not pulled from an archive, so each of their undefined references must be
# resolved) plus the static libraries of the layers below it and nothing else. A call from
# core into training, say, leaves `mc_...` undefined in that link: "undefined reference to
# `mc_...'", and the build stops. (Linking libmegatron.a alone never fails: the union holds
# every symbol, which is why the arrows held only by convention before.) Function pointers
# handed down at run time (callbacks, the backend table) are not arrows: that is how a lower
# layer calls back up.
#
# tests/layers/ proves the scheme: a CTest test (label `layers`) builds a probe in which core
# calls a training function and expects the link to fail with an undefined reference, and one in
# which training calls core and expects it to link.

# mc_layer(<name> DIRS <dir under src/>... [HEADERS <public header>...] [DEPS <layer>...]):
# DEPS are the layers <name> may call directly; what they may call comes with them
# (target_link_libraries PUBLIC). HEADERS: the headers of include/ that declare the layer's API
# (for the include check, tests/layers/test_layer_includes.py).
set(MC_LAYERS "")
function(mc_layer name)
  cmake_parse_arguments(L "" "" "DIRS;HEADERS;DEPS" ${ARGN})
  set(MC_LAYERS ${MC_LAYERS} ${name} PARENT_SCOPE)
  set(MC_LAYER_DIRS_${name} ${L_DIRS} PARENT_SCOPE)
  set(MC_LAYER_HEADERS_${name} ${L_HEADERS} PARENT_SCOPE)
  set(MC_LAYER_DEPS_${name} ${L_DEPS} PARENT_SCOPE)
endfunction()

# megatron/param_set.h: the parameter set, the header-only contract between a model (which
# builds it) and the optimizer / DDP (which take it), so neither needs the other
mc_layer(core              DIRS core              HEADERS megatron.h megatron/tensor.h megatron/param_set.h)
mc_layer(backend           DIRS backend           DEPS core)
mc_layer(parallel_state    DIRS parallel_state    DEPS core)
mc_layer(debug             DIRS debug             HEADERS megatron/dump.h DEPS core)
mc_layer(tensor_parallel   DIRS tensor_parallel   DEPS backend parallel_state core)
mc_layer(transformer       DIRS transformer       HEADERS megatron/transformer_config.h DEPS tensor_parallel backend parallel_state debug core)
mc_layer(models            DIRS models            HEADERS megatron/gpt.h DEPS transformer tensor_parallel backend parallel_state debug core)
mc_layer(pipeline_parallel DIRS pipeline_parallel DEPS backend parallel_state debug core)
mc_layer(optimizer         DIRS optimizer distributed HEADERS megatron/optimizer.h DEPS tensor_parallel backend parallel_state debug core)
mc_layer(datasets          DIRS datasets          HEADERS megatron/gpt_dataset.h megatron/indexed_dataset.h DEPS core)
mc_layer(tokenizer         DIRS tokenizer         HEADERS megatron/tokenizer.h DEPS core)
# formats only (torch zip/pickle, torch_dist, safetensors, state dict names): no arguments
mc_layer(checkpointing     DIRS checkpointing     HEADERS megatron/checkpoint.h DEPS models optimizer transformer tensor_parallel backend parallel_state debug core)
# arguments, the loop, the argument-aware checkpoint policy (training/checkpointing.c)
mc_layer(training          DIRS training          DEPS checkpointing models optimizer pipeline_parallel datasets tokenizer transformer tensor_parallel backend parallel_state debug core)
# the libraries of the programs in tools/ (the checkpoint converter: src/tools/checkpoint/)
mc_layer(tools             DIRS tools             DEPS training checkpointing models optimizer pipeline_parallel datasets tokenizer transformer tensor_parallel backend parallel_state debug core)
# text generation (megatron/core/inference): reads checkpoints through the converter's loaders
mc_layer(inference         DIRS inference         DEPS tools checkpointing models tokenizer transformer backend core)

# ---- TEMPORARILY ALLOWED upward arrows -------------------------------------------------------
# Each "<from>><to>" lets layer <from> call layer <to> until the change named beside it lands;
# the coordinator deletes the line then (and the build proves the arrow is gone).
set(MC_LAYER_TEMPORARY
  # none: the last one, transformer>models, went when the dropout mask moved to
  # transformer/dropout.c and TransformerConfig to megatron/transformer_config.h
)
foreach(arrow ${MC_LAYER_TEMPORARY})
  string(REPLACE ">" ";" pair ${arrow})
  list(GET pair 0 from)
  list(GET pair 1 to)
  list(APPEND MC_LAYER_DEPS_${from} ${to})
  message(STATUS "megatron.c layers: TEMPORARILY ALLOWED upward arrow ${from} -> ${to}")
endforeach()

# The table for the include check (tests/layers/test_layer_includes.py): header-only arrows
# (a struct from a higher layer, as checkpointing once took struct mc_args) do not show at link
# time, so the test reads every #include against the same DEPS.
set(json "{")
set(sep "")
foreach(layer ${MC_LAYERS})
  set(fields "")
  foreach(k DIRS HEADERS DEPS)
    set(items "")
    set(isep "")
    foreach(x ${MC_LAYER_${k}_${layer}})
      string(APPEND items "${isep}\"${x}\"")
      set(isep ", ")
    endforeach()
    string(TOLOWER ${k} key)
    string(APPEND fields "\"${key}\": [${items}], ")
  endforeach()
  string(REGEX REPLACE ", $" "" fields "${fields}")
  string(APPEND json "${sep}\n  \"${layer}\": {${fields}}")
  set(sep ",")
endforeach()
string(APPEND json "\n}\n")
file(WRITE ${CMAKE_BINARY_DIR}/layers/layers.json.tmp "${json}")
configure_file(${CMAKE_BINARY_DIR}/layers/layers.json.tmp ${CMAKE_BINARY_DIR}/layers/layers.json COPYONLY)

# Compile settings every layer's objects share (those libmegatron's objects always had).
add_library(mc_layer_settings INTERFACE)
target_include_directories(mc_layer_settings INTERFACE ${CMAKE_SOURCE_DIR}/include
                           ${CMAKE_SOURCE_DIR}/src ${MC_BLAS_INCLUDE_DIRS})
target_compile_options(mc_layer_settings INTERFACE ${MC_WARN} -fvisibility=hidden)
target_compile_definitions(mc_layer_settings INTERFACE MC_BUILDING_LIBRARY ${MC_BLAS_DEFINITIONS})
target_link_libraries(mc_layer_settings INTERFACE OpenMP::OpenMP_C ${MC_BLAS_LIBRARIES} m)
if(MPI_C_FOUND)
  target_link_libraries(mc_layer_settings INTERFACE MPI::MPI_C)
  target_compile_definitions(mc_layer_settings INTERFACE MC_HAVE_MPI=1)
endif()

# Every file under src/ belongs to exactly one layer: a new directory must be given one here.
set(MC_LAYER_SOURCES "")
foreach(layer ${MC_LAYERS})
  set(srcs "")
  foreach(dir ${MC_LAYER_DIRS_${layer}})
    file(GLOB_RECURSE s CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${dir}/*.c)
    list(APPEND srcs ${s})
  endforeach()
  if(NOT srcs)
    message(FATAL_ERROR "layer ${layer}: no sources in src/{${MC_LAYER_DIRS_${layer}}}")
  endif()
  list(APPEND MC_LAYER_SOURCES ${srcs})
  add_library(mc_layer_${layer}_obj OBJECT ${srcs})
  target_link_libraries(mc_layer_${layer}_obj PRIVATE mc_layer_settings)
  add_library(mc_layer_${layer} STATIC $<TARGET_OBJECTS:mc_layer_${layer}_obj>)
  set_target_properties(mc_layer_${layer} PROPERTIES ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/layers)
endforeach()
foreach(f ${MC_SRC})
  if(NOT f IN_LIST MC_LAYER_SOURCES)
    file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${f})
    message(FATAL_ERROR "${rel} is in no layer: give its directory a layer in cmake/layers.cmake")
  endif()
endforeach()
foreach(layer ${MC_LAYERS})
  foreach(dep ${MC_LAYER_DEPS_${layer}})
    if(NOT dep IN_LIST MC_LAYERS)
      message(FATAL_ERROR "layer ${layer}: unknown layer ${dep} in its DEPS")
    endif()
    target_link_libraries(mc_layer_${layer} PUBLIC mc_layer_${dep})
  endforeach()
  target_link_libraries(mc_layer_${layer} PUBLIC mc_layer_settings)
endforeach()

# mc_layer_check(<target> <layer> [EXCLUDE_FROM_ALL] [<extra .c>...]): a program of every
# object of <layer> (and the extra files, compiled as part of it) linked with the layers below
# only. The link is the check; the program is never run.
set(MC_LAYER_MAIN ${CMAKE_BINARY_DIR}/layers/layer_check_main.c)
file(WRITE ${MC_LAYER_MAIN}.in
  "/* generated by cmake/layers.cmake: the link of a layer check is the check */\n"
  "int main(void) { return 0; }\n")
configure_file(${MC_LAYER_MAIN}.in ${MC_LAYER_MAIN} COPYONLY)
function(mc_layer_check target layer)
  cmake_parse_arguments(C "EXCLUDE_FROM_ALL" "" "" ${ARGN})
  set(excl "")
  if(C_EXCLUDE_FROM_ALL)
    set(excl EXCLUDE_FROM_ALL)
  endif()
  add_executable(${target} ${excl} ${MC_LAYER_MAIN} ${C_UNPARSED_ARGUMENTS}
                 $<TARGET_OBJECTS:mc_layer_${layer}_obj>)
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/layers)
  target_link_libraries(${target} PRIVATE mc_layer_settings)
  foreach(dep ${MC_LAYER_DEPS_${layer}})
    target_link_libraries(${target} PRIVATE mc_layer_${dep})
  endforeach()
endfunction()
foreach(layer ${MC_LAYERS})
  mc_layer_check(layer_check_${layer} ${layer})
endforeach()

# libmegatron.a: the union of the layers, as before (the public library).
set(MC_ALL_OBJECTS "")
foreach(layer ${MC_LAYERS})
  list(APPEND MC_ALL_OBJECTS $<TARGET_OBJECTS:mc_layer_${layer}_obj>)
endforeach()
add_library(megatron STATIC ${MC_ALL_OBJECTS})
target_include_directories(megatron PUBLIC ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(megatron PUBLIC OpenMP::OpenMP_C ${MC_BLAS_LIBRARIES} m)
if(MPI_C_FOUND)
  target_link_libraries(megatron PUBLIC MPI::MPI_C)
  target_compile_definitions(megatron PUBLIC MC_HAVE_MPI=1)
endif()
