// Command npuserve serves GLM-5.3-Flash (glm5_next) with a vLLM-compatible
// command line and HTTP API, on Ascend NPUs or, by default and as the
// reference, on the CPU.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

func main() {
	app := newApp()
	if err := app.Run(os.Args); err != nil {
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			if msg := err.Error(); msg != "" {
				fmt.Fprintln(os.Stderr, "npuserve:", msg)
			}
			os.Exit(ec.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "npuserve:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:    "npuserve",
		Usage:   "serve GLM-5.3-Flash (glm5_next) on Ascend NPUs or the CPU",
		Version: version,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warning or error", EnvVars: []string{"NPUSERVE_LOG_LEVEL"}},
		},
		Before: func(c *cli.Context) error {
			lvl, err := logrus.ParseLevel(c.String("log-level"))
			if err != nil {
				return usageError("--log-level: %v", err)
			}
			logrus.SetLevel(lvl)
			logrus.SetOutput(os.Stderr)
			logrus.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "01-02 15:04:05"})
			return nil
		},
		Commands: []*cli.Command{
			serveCommand(),
			generateCommand(),
			tokenizeCommand(),
			renderCommand(),
			benchCommand(),
			quantizeCommand(), evalCommand(),
			selftestCommand(),
			{
				Name:  "version",
				Usage: "print the version",
				Action: func(c *cli.Context) error {
					fmt.Println(version)
					return nil
				},
			},
		},
		ExitErrHandler: func(*cli.Context, error) {},
	}
}

// usageError is a bad flag or argument: exit code 2 like flag parsing.
func usageError(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), 2)
}

// runError is a failure while running (bad model dir, I/O): exit code 1.
func runError(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), 1)
}
