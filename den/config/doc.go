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
// any other key (DEN_GFS, DEN_LOG_LEVEL, ...). Any other DEN_ variable is a
// warning naming it (Config.Warnings), except those den's service unit,
// task runners and tests use (otherVariables).
//
// Load returns a Config that embeds the den.Config a node runs with: den
// run hands it to den.New as it is, with no copy field by field.
//
// Every duration and number key has a default and a range, declared
// once: the node's in den.Settings (beside den.Config, whose fields they
// set), the command plugin's in bounds. A value outside its range, a node
// name that is not printable or longer than MaxNodeNameLength, and a value
// of the wrong type in either kind of file are refused with an error that
// names the key, the value and what is allowed. A list key in den's file is a YAML
// list (only the environment writes one as a comma-separated string). The
// MongoDB URI is parsed by the driver at load (mongouri.go), its password
// never shown; web.token must be at least MinWebTokenBits strong by a
// conservative estimate (token.go), since it alone bounds guessing on the
// web page.
package config
