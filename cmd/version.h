/* version.h — the version string every binary prints. */
#ifndef SB_VERSION_H
#define SB_VERSION_H
#define SB_VERSION "0.1.0-dev"
#endif
