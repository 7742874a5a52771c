# Debian packages: `cpack -G DEB` in the build directory writes one package per install component.
#   fanstore          component fanstore: bin/fanstore, bin/fanstore-agent and their man pages
#   fanstore-preload  component preload:  <libdir>/libfanstore_preload.so
#   fanstore-spank    component spank:    spank_fanstore.so in FANSTORE_SLURM_PLUGIN_DIR, its
#                                         man page, and the conffile
#                                         /etc/slurm/plugstack.conf.d/fanstore.conf, and the
#                                         empty mount prefix /fanstore
# The packages install under /usr whatever CMAKE_INSTALL_PREFIX is (`fanstore run` finds the agent
# and the library next to itself); the conffile names both, so the plugin needs no built-in path.

set(fanstore_pkg_prefix /usr)
set(fanstore_pkg_agent ${fanstore_pkg_prefix}/${CMAKE_INSTALL_BINDIR}/fanstore-agent)
set(fanstore_pkg_preload ${fanstore_pkg_prefix}/${CMAKE_INSTALL_LIBDIR}/libfanstore_preload.so)

# The plugstack line: etc/plugstack.conf.d/fanstore.conf, the documented example, with this
# build's plugin directory and the packaged agent and library. Installed only by the package
# (EXCLUDE_FROM_ALL): `cmake --install` does not write to /etc.
if(TARGET spank_fanstore)
  file(READ ${PROJECT_SOURCE_DIR}/etc/plugstack.conf.d/fanstore.conf fanstore_conf)
  set(fanstore_line "required ${FANSTORE_SLURM_PLUGIN_DIR}/spank_fanstore.so")
  string(APPEND fanstore_line " agent=${fanstore_pkg_agent} preload=${fanstore_pkg_preload}")
  string(REGEX REPLACE "\nrequired [^ \n]+/spank_fanstore\\.so" "\n${fanstore_line}"
         fanstore_conf "${fanstore_conf}")
  set(fanstore_conf_file ${CMAKE_BINARY_DIR}/packaging/fanstore.conf)
  file(CONFIGURE OUTPUT ${fanstore_conf_file} CONTENT "${fanstore_conf}" @ONLY)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${PROJECT_SOURCE_DIR}/etc/plugstack.conf.d/fanstore.conf)
  install(FILES ${fanstore_conf_file} DESTINATION /etc/slurm/plugstack.conf.d COMPONENT spank
          EXCLUDE_FROM_ALL)
  # The default mount_prefix, empty: each task's kernel-visible view mounts a small tmpfs over it in
  # the task's own namespace (spank-plugin/dirs.h, KernelViewMount); the node's stays empty.
  install(DIRECTORY DESTINATION /fanstore COMPONENT spank EXCLUDE_FROM_ALL)
  file(WRITE ${CMAKE_BINARY_DIR}/packaging/spank/conffiles
       "/etc/slurm/plugstack.conf.d/fanstore.conf\n")
endif()

set(CPACK_PACKAGE_NAME fanstore)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "FanStore")
set(CPACK_PACKAGE_CONTACT "FanStore developers <fanstore@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX ${fanstore_pkg_prefix})
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
set(CPACK_COMPONENTS_ALL fanstore preload)
if(TARGET spank_fanstore)
  list(APPEND CPACK_COMPONENTS_ALL spank)
endif()

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Shared-library dependencies from dpkg-shlibdeps: libpmix2, libmunge2, libsodium23, libssl3 and libzstd1
# for the agent, libc6 and the C++ runtime. (xxHash is compiled in: common/hash.h, XXH_INLINE_ALL.)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Debian ships stripped binaries: RelWithDebInfo's debug sections make them 40 times larger.
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FANSTORE_PACKAGE_NAME fanstore)
# Descriptions: the first line is the synopsis; CPack indents the rest.
string(CONCAT CPACK_COMPONENT_FANSTORE_DESCRIPTION
    "job-scoped storage for deep-learning I/O on Slurm: tools and node agent\n"
    "fanstore packs, checks, lists and extracts FanStore datasets, and serves one on a single "
    "machine (fanstore run). fanstore-agent, started by the SPANK plugin, stages a dataset to "
    "node-local storage and serves it to a Slurm job's tasks.")
# `fanstore run` preloads the library; the other commands do not need it.
set(CPACK_DEBIAN_FANSTORE_PACKAGE_RECOMMENDS "fanstore-preload (= ${PROJECT_VERSION})")

set(CPACK_DEBIAN_PRELOAD_PACKAGE_NAME fanstore-preload)
string(CONCAT CPACK_COMPONENT_PRELOAD_DESCRIPTION
    "job-scoped storage for deep-learning I/O on Slurm: interception library\n"
    "libfanstore_preload.so, preloaded into a job's tasks, serves a FanStore dataset at a "
    "virtual, read-only path through ordinary file calls.")

set(CPACK_DEBIAN_SPANK_PACKAGE_NAME fanstore-spank)
string(CONCAT CPACK_COMPONENT_SPANK_DESCRIPTION
    "job-scoped storage for deep-learning I/O on Slurm: SPANK plugin\n"
    "spank_fanstore.so adds --fanstore to sbatch, salloc and srun: it checks the dataset at "
    "submission, starts the FanStore agents of the job and preloads the interception library "
    "into its tasks. Enabled by /etc/slurm/plugstack.conf.d/fanstore.conf.")
# Depends: fanstore (= version), fanstore-preload (= version).
set(CPACK_COMPONENT_SPANK_DEPENDS fanstore preload)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
# Slurm loads a plugin only when built for its release (22.05, ...); the plugin runs srun and
# squeue (slurm-client, which brings slurm-wlm-basic-plugins, the owner of the plugin directory and
# of plugstack.conf.d); Slurm's pmix MPI plugin, which starts the agent step, dlopens libpmix.so,
# which only libpmix-dev ships.
if(FANSTORE_SLURM_INCLUDE_DIR AND EXISTS ${FANSTORE_SLURM_INCLUDE_DIR}/slurm/slurm_version.h)
  file(STRINGS ${FANSTORE_SLURM_INCLUDE_DIR}/slurm/slurm_version.h fanstore_slurm_version
       REGEX "^#define SLURM_VERSION_NUMBER ")
  string(REGEX REPLACE ".* 0x([0-9a-fA-F][0-9a-fA-F])([0-9a-fA-F][0-9a-fA-F]).*" "\\1;\\2"
         fanstore_slurm_version "${fanstore_slurm_version}")
  list(GET fanstore_slurm_version 0 fanstore_slurm_major)
  list(GET fanstore_slurm_version 1 fanstore_slurm_minor)
  math(EXPR fanstore_slurm_major "0x${fanstore_slurm_major}")
  math(EXPR fanstore_slurm_minor "0x${fanstore_slurm_minor}")
  math(EXPR fanstore_slurm_next "${fanstore_slurm_minor} + 1")
  # Releases are YY.MM: one built for 22.05.x needs >= 22.05 and << 22.06 in Debian's ordering.
  set(fanstore_slurm_lo "${fanstore_slurm_major}.${fanstore_slurm_minor}")
  set(fanstore_slurm_hi "${fanstore_slurm_major}.${fanstore_slurm_next}")
  if(fanstore_slurm_minor LESS 10)
    set(fanstore_slurm_lo "${fanstore_slurm_major}.0${fanstore_slurm_minor}")
  endif()
  if(fanstore_slurm_next LESS 10)
    set(fanstore_slurm_hi "${fanstore_slurm_major}.0${fanstore_slurm_next}")
  endif()
  set(CPACK_DEBIAN_SPANK_PACKAGE_DEPENDS
      "slurm-client (>= ${fanstore_slurm_lo}), slurm-client (<< ${fanstore_slurm_hi}), libpmix-dev")
endif()
set(CPACK_DEBIAN_SPANK_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/packaging/spank/conffiles)

include(CPack)
