// Package config loads a node's configuration with viper, from (lowest to
// highest precedence) defaults, a file, environment variables and flags.
//
// The file is either den's own YAML (see testdata/den.yaml) or an existing
// Disbatch 4 /etc/disbatch/config.json, detected by its .json extension or
// its mongohost key. Disbatch's file is relaxed JSON: # and // comments and
// trailing commas are allowed. Its keys mongohost, database, attributes.ssl,
// auth, activequeues, ignorequeues and gfs are used; the Perl-only keys
// (log4perl, web_root, plugins, task_runner, ...) are accepted and ignored.
//
// Environment: DEN_MONGO_URI, DEN_DATABASE and DEN_NODE, and DEN_<KEY> for
// any other key (DEN_GFS, DEN_LOG_LEVEL, ...).
package config
