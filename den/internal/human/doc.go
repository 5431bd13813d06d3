// Package human renders times and task states for people, the same way in
// the command line's tables and on the web status page.
package human
