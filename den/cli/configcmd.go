package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/den-project/den/den/config"
	"github.com/den-project/den/den/internal/human"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show the node configuration",
	}
	print := &cobra.Command{
		Use:   "print",
		Short: "Print the effective node configuration and where each value came from",
		Long: `Load the configuration exactly as den run does (defaults, then --config
FILE, then DEN_* environment, then flags) and print every key with its
effective value and the layer that set it: default, file PATH, environment
VARIABLE, or flag --NAME. Passwords in the MongoDB URI are hidden. Takes
den run's flags. Does not connect to MongoDB.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			settings, cfg, err := config.Explain("", cmd.Flags())
			if err != nil {
				return usageError{err}
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), settings)
			}
			t := newTable(cmd.OutOrStdout(), "KEY", "VALUE", "SOURCE")
			for _, s := range settings {
				t.row(s.Key, s.String(), s.Source)
			}
			t.flush()
			for _, w := range cfg.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "den: warning:", human.Escape(fmt.Sprint(w)))
			}
			return nil
		},
	}
	config.AddFlags(print.Flags())
	addJSONFlag(print.Flags())
	cmd.AddCommand(print)
	return cmd
}
