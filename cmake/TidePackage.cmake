# Install the CMake package (tideConfig.cmake, its version file, the targets
# and TideAddPlugin.cmake) and tide.pc, both relocatable, so plugins and
# programs can be built against an installed tide (docs/sdk.md).
include(CMakePackageConfigHelpers)

file(STRINGS "${PROJECT_SOURCE_DIR}/core/include/tide/plugin.h" _abi
     REGEX "^#define TIDE_ABI_VERSION [0-9]+u?$")
string(REGEX REPLACE "^#define TIDE_ABI_VERSION ([0-9]+)u?$" "\\1" TIDE_ABI_VERSION "${_abi}")
file(STRINGS "${PROJECT_SOURCE_DIR}/core/include/tide/engine.h" _api
     REGEX "^#define TIDE_ENGINE_API_VERSION [0-9]+$")
string(REGEX REPLACE "^#define TIDE_ENGINE_API_VERSION ([0-9]+)$" "\\1" TIDE_ENGINE_API_VERSION
       "${_api}")
if(NOT TIDE_ABI_VERSION MATCHES "^[0-9]+$" OR NOT TIDE_ENGINE_API_VERSION MATCHES "^[0-9]+$")
  message(FATAL_ERROR "cannot read TIDE_ABI_VERSION / TIDE_ENGINE_API_VERSION from the headers")
endif()

# The decoders' header-only helpers (canvas, params, probs, rng, sample), so
# a decoder built out of tree shares them: `#include "decoder-common/probs.h"`
# with tide::tide's include folder. They include each other and tide/*.h only.
install(DIRECTORY "${PROJECT_SOURCE_DIR}/plugins/decoder-common/"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/decoder-common" FILES_MATCHING PATTERN "*.h")
# The same for policies (plan, rank, initial, fullswap, costs, rentbuy):
# `#include "policy-common/plan.h"`, and `tide policy-check PLUGIN` checks
# the result (docs/writing-a-policy.md).
install(DIRECTORY "${PROJECT_SOURCE_DIR}/plugins/policy-common/"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/policy-common" FILES_MATCHING PATTERN "*.h")

set(TIDE_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/tide")
set(TIDE_PLUGIN_INSTALL_SUBDIR "${CMAKE_INSTALL_LIBDIR}/tide/plugins")
install(EXPORT tideTargets NAMESPACE tide:: FILE tideTargets.cmake
        DESTINATION "${TIDE_CMAKE_INSTALL_DIR}")
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/tideConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/cmake/tideConfig.cmake"
  INSTALL_DESTINATION "${TIDE_CMAKE_INSTALL_DIR}"
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_BINDIR
            TIDE_PLUGIN_INSTALL_SUBDIR)
# 0.x: a minor version may change the plugin ABI, so only 0.y.* matches 0.y
# (the loader refuses plugins of another TIDE_ABI_VERSION anyway).
write_basic_package_version_file("${PROJECT_BINARY_DIR}/cmake/tideConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/cmake/tideConfig.cmake"
              "${PROJECT_BINARY_DIR}/cmake/tideConfigVersion.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/TideAddPlugin.cmake"
        DESTINATION "${TIDE_CMAKE_INSTALL_DIR}")

# tide.pc: ${pcfiledir} keeps it right after `cmake --install --prefix`.
set(_pcdir "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(TIDE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(TIDE_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(TIDE_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
  set(_pcdir "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig")
else()
  file(RELATIVE_PATH _up "/prefix/${_pcdir}" "/prefix")
  string(REGEX REPLACE "/$" "" _up "${_up}")
  set(TIDE_PC_PREFIX "\${pcfiledir}/${_up}")
  set(TIDE_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(TIDE_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file("${PROJECT_SOURCE_DIR}/cmake/tide.pc.in" "${PROJECT_BINARY_DIR}/tide.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/tide.pc" DESTINATION "${_pcdir}")
