# Sourced by testbed/images/build.sh and release/build-image.sh: the one recipe of the
# Debian base they both build with mmdebstrap (bookworm minbase + Python), and its key.
base_pkgs="python3,python3-pip,python3-venv,python-is-python3,ca-certificates,passwd"
# Merged /usr the debootstrap way (symlinks + usr-is-merged): without the hook apt meets
# init-system-helpers' "usrmerge | usr-is-merged" with usrmerge, which pulls in perl
# (~50 MB). Locales, man pages and docs (the copyright files kept) are not unpacked:
# ~45 MB nothing in the image reads, that every bed node would pull and unpack.
base_opts=(--variant=minbase
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  '--dpkgopt=path-exclude=/usr/share/locale/*'
  '--dpkgopt=path-exclude=/usr/share/man/*'
  '--dpkgopt=path-exclude=/usr/share/info/*'
  '--dpkgopt=path-exclude=/usr/share/doc/*'
  '--dpkgopt=path-include=/usr/share/doc/*/copyright')
base_recipe="bookworm ${base_opts[*]} $base_pkgs"
