# CTest side of the layer checks (cmake/layers.cmake), label `layers`:
#   layers_arrow_up    core calls training (probe_up.c): the build of layer_probe_up must fail
#                      with an undefined reference to mc_args_init
#   layers_arrow_down  training calls core (probe_down.c): layer_probe_down must link
# The probes are built by the same mc_layer_check as the real layer_check_<name> programs,
# outside `all` (the build only builds them when these tests ask). They share the build tree,
# hence the lock.
mc_layer_check(layer_probe_up core EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/tests/layers/probe_up.c)
mc_layer_check(layer_probe_down training EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/tests/layers/probe_down.c)
add_test(NAME layers_arrow_up COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR}
         -DTARGET=layer_probe_up -DEXPECT=fail -DSYMBOL=mc_args_init
         -P ${CMAKE_SOURCE_DIR}/tests/layers/expect_link.cmake)
add_test(NAME layers_arrow_down COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR}
         -DTARGET=layer_probe_down -DEXPECT=link
         -P ${CMAKE_SOURCE_DIR}/tests/layers/expect_link.cmake)
set_tests_properties(layers_arrow_up layers_arrow_down PROPERTIES LABELS "layers;unit"
                     TIMEOUT 120 RESOURCE_LOCK mc_build_tree)
