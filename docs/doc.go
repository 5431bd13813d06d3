// Package docs holds den's documentation (the Markdown files beside this
// one) and, in its test, the check that every link in it and in the
// README leads somewhere: a file of the repository, and a heading of it
// where the link names one.
package docs
