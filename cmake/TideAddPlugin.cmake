# tide_add_plugin(NAME [SOURCES] file... [LINK_LIBRARIES lib...]
#                 [OUTPUT_DIRECTORY dir] [INSTALL_DIR dir] [NO_INSTALL])
#
# Builds a TIDE plugin the way the loader expects it: a MODULE library named
# exactly NAME.so (no "lib" prefix), compiled with hidden visibility for C,
# C++ and CUDA (a plugin exports one symbol, tide_plugin_entry, marked
# TIDE_PLUGIN_EXPORT), linked against libtide with --no-undefined (a missing
# symbol fails the link, not the dlopen), with an rpath to libtide, and
# installed into a plugin folder.
#
# One file for both worlds: this source tree includes it for its own plugins,
# and the CMake package installs it, so `find_package(tide CONFIG)` gives
# plugins built out of tree the same function (docs/sdk.md). What differs
# comes from variables of the calling scope:
#   TIDE_PLUGIN_LIBRARY        what to link: tide_core (in tree) or tide::tide
#   TIDE_PLUGIN_INCLUDE_DIRS   extra private include folders (optional)
#   TIDE_PLUGIN_OUTPUT_DIR     folder the .so is built in (optional)
#   TIDE_PLUGIN_INSTALL_DIR    default install destination
#   TIDE_PLUGIN_INSTALL_RPATH  rpath of the installed plugin
include_guard(GLOBAL)

function(tide_add_plugin name)
  cmake_parse_arguments(P "NO_INSTALL" "OUTPUT_DIRECTORY;INSTALL_DIR" "SOURCES;LINK_LIBRARIES"
                        ${ARGN})
  set(srcs ${P_SOURCES} ${P_UNPARSED_ARGUMENTS})
  if(NOT srcs)
    message(FATAL_ERROR "tide_add_plugin(${name}): no source files")
  endif()
  if(NOT TIDE_PLUGIN_LIBRARY)
    message(FATAL_ERROR "tide_add_plugin(${name}): TIDE_PLUGIN_LIBRARY is not set; call "
                        "find_package(tide CONFIG REQUIRED) first")
  endif()
  add_library(${name} MODULE ${srcs})
  set_target_properties(${name} PROPERTIES PREFIX "" SUFFIX ".so" OUTPUT_NAME "${name}"
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON POSITION_INDEPENDENT_CODE ON)
  set(out "${P_OUTPUT_DIRECTORY}")
  if(NOT out)
    set(out "${TIDE_PLUGIN_OUTPUT_DIR}")
  endif()
  if(out)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${out}")
  endif()
  if(DEFINED TIDE_PLUGIN_INSTALL_RPATH)
    set_target_properties(${name} PROPERTIES INSTALL_RPATH "${TIDE_PLUGIN_INSTALL_RPATH}")
  endif()
  target_link_libraries(${name} PRIVATE ${TIDE_PLUGIN_LIBRARY} ${P_LINK_LIBRARIES})
  if(TIDE_PLUGIN_INCLUDE_DIRS)
    target_include_directories(${name} PRIVATE ${TIDE_PLUGIN_INCLUDE_DIRS})
  endif()
  target_link_options(${name} PRIVATE "LINKER:--no-undefined")
  if(NOT P_NO_INSTALL)
    set(dest "${P_INSTALL_DIR}")
    if(NOT dest)
      set(dest "${TIDE_PLUGIN_INSTALL_DIR}")
    endif()
    if(NOT dest)
      set(dest "lib/tide/plugins")
    endif()
    install(TARGETS ${name} LIBRARY DESTINATION "${dest}")
  endif()
endfunction()
